# SPDX-License-Identifier: MIT
# leakguard.isolated / leakguard.run_isolated (issue #15, docs/isolate.md).
# Compiled into the extension (src/python/python.cmake) and run in the module's
# namespace at import: _isolate_call (src/python/isolate.c) is the C half.


class _Lazy:
    """A module imported on its first use. Every Python program under the recorder
    imports leakguard (python/sitecustomize.py), and so runs this file: importing
    pickle, threading, traceback, functools and weakref here made 40 more modules,
    recorded, 60-80 ms of every such program's start-up (BENCHMARKS.md)."""

    def __init__(self, name):
        self._name = name
        self._mod = None

    def __getattr__(self, attr):
        if self._mod is None:
            self._mod = __import__(self._name)
        return getattr(self._mod, attr)


def _ready():
    """Imports them in the caller, before it forks: an isolated child cannot open the
    modules' files (its system calls are filtered), and a fork may find another thread
    inside an import."""
    for m in (_functools, _pickle, _threading, _traceback, _weakref):
        if m._mod is None:
            m._mod = __import__(m._name)


_functools = _Lazy("functools")
_pickle = _Lazy("pickle")
_threading = _Lazy("threading")
_traceback = _Lazy("traceback")
_weakref = _Lazy("weakref")


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


_BUDGET = {"auto": 0, "rss": 1, "cgroup": 2}


def _budget_by(budget):
    if budget not in _BUDGET:
        raise ValueError("budget: 'auto', 'rss' or 'cgroup', not %r" % (budget,))
    return _BUDGET[budget]


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


def _answer(fn, args, kwargs):
    """In the child: fn's result or exception, pickled, tagged R or E."""
    try:
        return b"R" + _pickle.dumps(fn(*args, **kwargs), protocol=_pickle.HIGHEST_PROTOCOL)
    except BaseException as e:  # noqa: B902 -- every exception goes back to the caller
        tb = _traceback.format_exc()
        try:
            return b"E" + _pickle.dumps((e, tb), protocol=_pickle.HIGHEST_PROTOCOL)
        except Exception:
            err = RuntimeError("%s: %s (the exception could not be pickled)" % (type(e).__name__, e))
            return b"E" + _pickle.dumps((err, tb), protocol=_pickle.HIGHEST_PROTOCOL)


def _outcome(r):
    """In the caller: the result of an isolated call, or its exception raised."""
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


def run_isolated(fn, *args, max_rss=None, timeout=None, allow=(), budget="auto", **kwargs):
    """Runs fn(*args, **kwargs) in a copy-on-write fork of this process under a
    seccomp filter, a memory budget (max_rss: bytes or '100M', '2G'; enforced by a
    cgroup of the child's own where the hierarchy allows, else by polling its RSS:
    budget='auto', 'cgroup' or 'rss') and a timeout (seconds); returns its (pickled)
    result or re-raises its exception here."""
    _ready()
    mask = _allow_mask(allow)
    size = _parse_size(max_rss)
    t = float(timeout) if timeout else 0.0
    by = _budget_by(budget)

    def child():
        _after_fork_in_child()
        return _answer(fn, args, kwargs)

    return _outcome(_isolate_call(child, size, t, mask, by))


_pools = []  # [weakref.WeakSet()] once a pool was made


def _close_pools():
    for p in list(_pools[0] if _pools else ()):
        p.close()


import atexit as _atexit  # noqa: E402

_atexit.register(_close_pools)


class IsolatedPool:
    """size children of this process, forked ahead as it is now (load the model
    first), each isolated as run_isolated's child is and waiting for one request
    (reuse=K: up to K, its memory checked between them). A background thread forks
    replacements; a call that finds none ready forks its own. Thread-safe.

    pool.call(fn, *args, **kwargs): fn and the arguments are pickled to the child
    (fn by reference: a module-level function that existed when the pool was made).
    IsolatedPool(size, handler=f): pool(*args, **kwargs) calls f, which is not pickled.
    Use it as a context manager or close() it; pools still open are closed at exit."""

    def __init__(self, size=4, *, handler=None, max_rss=None, timeout=None, allow=(), reuse=1, budget="auto"):
        _ready()
        size = int(size)
        reuse = int(reuse)
        if size < 1 or size > 1024:
            raise ValueError("size: 1 to 1024 children, not %d" % size)
        if reuse < 1:
            raise ValueError("reuse must be at least 1")
        mask = _allow_mask(allow)
        nbytes = _parse_size(max_rss)
        t = float(timeout) if timeout else 0.0
        by = _budget_by(budget)
        self.handler = handler

        def dispatch(request):  # in the child
            _after_fork_in_child()
            try:
                fn, args, kwargs = _pickle.loads(request)
            except BaseException as e:  # noqa: B902
                err = "%s: %s" % (type(e).__name__, e)
            else:
                return _answer(handler if fn is None else fn, args, kwargs)
            return _answer(_raise_unpickling, (err,), {})

        self._cap = _isolate_pool_new(dispatch, size, nbytes, t, mask, reuse, by)
        self._lock = _threading.Lock()
        if not _pools:
            _pools.append(_weakref.WeakSet())
        _pools[0].add(self)

    def call(self, fn, *args, **kwargs):
        """fn(*args, **kwargs) in a pooled child: its result, or its exception raised."""
        return self._run(fn, args, kwargs)

    def __call__(self, *args, **kwargs):
        if self.handler is None:
            raise TypeError("this pool has no handler: use pool.call(fn, ...)")
        return self._run(None, args, kwargs)

    def _run(self, fn, args, kwargs):
        cap = self._cap
        if cap is None:
            raise ValueError("the isolated pool is closed")
        request = _pickle.dumps((fn, args, kwargs), protocol=_pickle.HIGHEST_PROTOCOL)
        return _outcome(_isolate_pool_call(cap, request))

    def ready(self):
        """Children ready now."""
        cap = self._cap
        return 0 if cap is None else _isolate_pool_ready(cap)

    def close(self):
        """Kills the waiting children and stops the refill thread."""
        with self._lock:
            cap, self._cap = self._cap, None
        if cap is not None:
            _isolate_pool_free(cap)
        if _pools:
            _pools[0].discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _raise_unpickling(err):
    raise IsolationError(
        "the pooled child could not unpickle the request (%s): a pooled child is a copy of the"
        " process made with the pool, so what the request names must exist then" % err
    )


def isolated(fn=None, *, max_rss=None, timeout=None, allow=(), budget="auto", pool=0, reuse=1):
    """Decorator: @leakguard.isolated(max_rss="2G", timeout=30, allow=()) runs every
    call of the function isolated (run_isolated). Also isolated(fn) and
    isolated(max_rss=...)(fn)(*args). pool=N: calls go to a pool of N pre-forked
    children (IsolatedPool), made at the first call: warm the process up before it;
    reuse=K: a pooled child serves up to K calls."""
    _ready()
    _allow_mask(allow)
    _parse_size(max_rss)
    _budget_by(budget)
    if int(pool) < 0:
        raise ValueError("pool must not be negative")

    def deco(f):
        if not pool:

            @_functools.wraps(f)
            def wrapper(*args, **kwargs):
                return run_isolated(f, *args, max_rss=max_rss, timeout=timeout, allow=allow, budget=budget, **kwargs)

            return wrapper
        lock = _threading.Lock()
        made = []

        @_functools.wraps(f)
        def pooled(*args, **kwargs):
            if not made:
                with lock:
                    if not made:
                        made.append(
                            IsolatedPool(
                                pool, handler=f, max_rss=max_rss, timeout=timeout, allow=allow, reuse=reuse,
                                budget=budget
                            )
                        )
            return made[0](*args, **kwargs)

        pooled.pool = made
        return pooled

    return deco(fn) if fn is not None else deco
