# SPDX-License-Identifier: MIT
# leakguard.isolated / leakguard.run_isolated (issue #15, docs/isolate.md).
# Compiled into the extension (src/python/python.cmake) and run in the module's
# namespace at import: _isolate_call (src/python/isolate.c) is the C half.
import functools as _functools
import pickle as _pickle
import traceback as _traceback


class MemoryBudgetExceeded(MemoryError):
    """The isolated handler grew past its memory budget and was killed."""


class IsolationViolation(PermissionError):
    """The isolated handler made a forbidden system call (.syscall names it)."""

    def __init__(self, syscall, message=None):
        super().__init__(message or "forbidden system call: %s" % syscall)
        self.syscall = syscall


class IsolationTimeout(TimeoutError):
    """The isolated handler ran past its timeout and was killed."""


class IsolationCrash(RuntimeError):
    """The isolated child died (.signal, .signame: the signal; 0/None when it exited)."""

    def __init__(self, message, signal=0, signame=None, exit_code=0):
        super().__init__(message)
        self.signal, self.signame, self.exit_code = signal, signame, exit_code


class IsolationError(RuntimeError):
    """The isolation could not be set up (bad options, fork failed...)."""


ALLOW_NET, ALLOW_WRITE, ALLOW_EXEC, ALLOW_PROC = 1, 2, 4, 8
_ALLOW = {"net": ALLOW_NET, "write": ALLOW_WRITE, "exec": ALLOW_EXEC, "proc": ALLOW_PROC}
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _parse_size(v):
    if v is None:
        return 0
    if isinstance(v, bool):
        raise TypeError("max_rss: a size (bytes or '100M', '2G'), not a bool")
    if isinstance(v, int):
        if v < 0:
            raise ValueError("max_rss must not be negative")
        return v
    s = str(v).strip().upper()
    if s.endswith("IB"):
        s = s[:-2]
    elif s.endswith("B") and len(s) > 1 and s[-2] in "KMGT":
        s = s[:-1]
    unit = s[-1:] if s[-1:] in _UNITS and s[-1:] else ""
    num = s[: len(s) - len(unit)] if unit else s
    try:
        n = float(num)
    except ValueError:
        raise ValueError("max_rss: cannot read %r as a size" % (v,)) from None
    if n < 0:
        raise ValueError("max_rss must not be negative")
    return int(n * _UNITS[unit])


def _allow_mask(allow):
    if isinstance(allow, str):
        allow = (allow,)
    mask = 0
    for a in allow or ():
        if isinstance(a, int):
            mask |= a
        elif a in _ALLOW:
            mask |= _ALLOW[a]
        else:
            raise ValueError("allow: unknown capability %r (known: %s)" % (a, ", ".join(_ALLOW)))
    return mask


def _after_fork_in_child():
    # The child has only the forking thread: a thread pool the caller had started
    # (torch's OpenMP team) is gone, and libgomp would wait for it forever. One thread
    # runs torch's parallel regions inline.
    import sys as _sys

    torch = _sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        try:
            torch.set_num_threads(1)
        except Exception:
            pass


def run_isolated(fn, *args, max_rss=None, timeout=None, allow=(), **kwargs):
    """Runs fn(*args, **kwargs) in a copy-on-write fork of this process under a
    seccomp filter, a memory budget (max_rss: bytes or '100M', '2G') and a timeout
    (seconds); returns its (pickled) result or re-raises its exception here."""
    mask = _allow_mask(allow)
    budget = _parse_size(max_rss)
    t = float(timeout) if timeout else 0.0

    def child():
        _after_fork_in_child()
        try:
            return b"R" + _pickle.dumps(fn(*args, **kwargs), protocol=_pickle.HIGHEST_PROTOCOL)
        except BaseException as e:  # noqa: B902 -- every exception goes back to the caller
            tb = _traceback.format_exc()
            try:
                return b"E" + _pickle.dumps((e, tb), protocol=_pickle.HIGHEST_PROTOCOL)
            except Exception:
                err = RuntimeError("%s: %s (the exception could not be pickled)" % (type(e).__name__, e))
                return b"E" + _pickle.dumps((err, tb), protocol=_pickle.HIGHEST_PROTOCOL)

    r = _isolate_call(child, budget, t, mask)
    out = r["outcome"]
    if out == "ok":
        p = r["payload"]
        if p is None:
            raise IsolationError("the isolated handler returned no result")
        if p[:1] == b"R":
            return _pickle.loads(p[1:])
        exc, tb = _pickle.loads(p[1:])
        if hasattr(exc, "add_note"):
            exc.add_note("raised in an isolated child (leakguard.isolated):\n" + tb.rstrip())
        raise exc
    if out == "budget":
        raise MemoryBudgetExceeded(r["message"])
    if out == "forbidden":
        raise IsolationViolation(r["syscall"], r["message"] if r["syscall"] == "unknown" else None)
    if out == "timeout":
        raise IsolationTimeout(r["message"])
    if out == "crash":
        sig = r["signal"]
        name = None
        if sig:
            import signal as _signal

            try:
                name = _signal.Signals(sig).name
            except ValueError:
                name = "signal %d" % sig
        raise IsolationCrash(r["message"], sig, name, r["exit_code"])
    raise IsolationError(r["message"])


def isolated(fn=None, *, max_rss=None, timeout=None, allow=()):
    """Decorator: @leakguard.isolated(max_rss="2G", timeout=30, allow=()) runs every
    call of the function isolated (run_isolated). Also isolated(fn) and
    isolated(max_rss=...)(fn)(*args)."""
    _allow_mask(allow)
    _parse_size(max_rss)

    def deco(f):
        @_functools.wraps(f)
        def wrapper(*args, **kwargs):
            return run_isolated(f, *args, max_rss=max_rss, timeout=timeout, allow=allow, **kwargs)

        return wrapper

    return deco(fn) if fn is not None else deco
