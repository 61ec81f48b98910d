#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""leakguard.isolated / run_isolated (issue #15), the issue's tests, one case per run:

  state      N requests (default 500, LG_ISOLATE_STATE_N)
             each appending 1 MiB to a module global: each sees the pristine (empty)
             global, the caller's RSS grows <= 10 MB (a leak would add N MiB)
  forbidden  socket(), open(.., "w"), execve -> IsolationViolation naming the call;
             allow=("net",) lets socket() through; the caller is unharmed
  budget     touching 400 MB under max_rss="100M" -> MemoryBudgetExceeded (a MemoryError)
  timeout    an endless loop -> IsolationTimeout (a TimeoutError); a segfault ->
             IsolationCrash naming SIGSEGV; a handler's exception re-raised as itself
  threads    concurrent isolated calls from 4 threads, each answer its own
  torch      a torch CPU model's outputs identical isolated and in-process (the caller
             runs torch with 2 threads: the child must not wait for the pool it lacks)
  run        the same module under `leakguard run` (the recorder preloaded)
  pool       leakguard.IsolatedPool and isolated(pool=N): the state test over the pool,
             exceptions, budget, forbidden calls, timeout, threads, reuse, close, and
             no cgroup left behind; run on every CPython the module is built for
             (its interpreters forking from a thread that is not theirs)

usage: test_isolate.py --pydir BUILD/python CASE [--leakguard BUILD/bin/leakguard]
Run with /usr/bin/python3 (python3-torch is Debian's); pool with any."""
import argparse
import os
import subprocess
import sys
import tempfile
import threading

ap = argparse.ArgumentParser()
ap.add_argument("--pydir", required=True)
ap.add_argument("--leakguard")
ap.add_argument("case")
args = ap.parse_args()
sys.path.insert(0, args.pydir)
import leakguard as lg  # noqa: E402

HISTORY = []


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)


def append_mib(i):
    seen = len(HISTORY)
    HISTORY.append(bytearray(1 << 20))
    HISTORY[-1][::4096] = b"\1" * 256  # touch every page
    return (i, seen, len(HISTORY))


def case_state():
    for i in range(5):  # warm up: the first calls import pickle's helpers, traceback...
        lg.run_isolated(append_mib, -1)
    n = int(os.environ.get("LG_ISOLATE_STATE_N", "500"))
    before = rss()
    bad = []
    for i in range(n):
        r = lg.run_isolated(append_mib, i)
        if r != (i, 0, 1):
            bad.append(r)
    grew = rss() - before
    check(not bad, "%d requests each saw the pristine state (first bad: %r)" % (n, bad[:1]))
    check(HISTORY == [], "the caller's global is untouched")
    check(grew <= 10 << 20, "caller RSS grew %.1f MB over %d requests (<= 10 MB)" % (grew / 1e6, n))
    st = lg.isolate_stats()
    check(st["requests"]["ok"] >= n + 5, "isolate_stats counts the requests: %r" % (st["requests"],))


def expect(exc, fn, *a, **kw):
    try:
        r = lg.run_isolated(fn, *a, **kw)
    except exc as e:
        return e
    check(False, "%s raised, got result %r" % (exc.__name__, r))


def case_forbidden():
    import socket

    e = expect(lg.IsolationViolation, lambda: socket.socket())
    check(isinstance(e, PermissionError) and e.syscall == "socket" and "socket" in str(e), "socket(): %s" % e)
    path = os.path.join(tempfile.gettempdir(), "lg-isolate-%d" % os.getpid())

    def write():
        with open(path, "w") as f:
            f.write("x")

    e = expect(lg.IsolationViolation, write)
    check(e.syscall == "openat" and not os.path.exists(path), "open(.., 'w'): %s, no file" % e)
    e = expect(lg.IsolationViolation, os.execv, "/bin/true", ["true"])
    check(e.syscall == "execve", "execve: %s" % e)
    e = expect(lg.IsolationViolation, subprocess.run, ["/bin/true"])
    # _posixsubprocess blocks every signal around vfork: denied, but not named
    check(e.syscall in ("clone", "vfork", "unknown"), "subprocess: %s" % e)
    with open("/proc/self/stat") as f:  # reading stays possible
        mine = f.read().split()[0]
    check(lg.run_isolated(lambda: open("/proc/self/stat").read().split()[0]) != mine, "open for reading works")
    s = lg.run_isolated(lambda: socket.socket().close() or "made", allow=("net",))
    check(s == "made", "allow=('net',) permits socket()")
    check(lg.run_isolated(lambda: 6 * 7) == 42, "the caller is unharmed")


def touch(n):
    b = bytearray(n)
    b[::4096] = b"\1" * (n // 4096)
    return len(b)


def case_budget():
    e = expect(lg.MemoryBudgetExceeded, touch, 400 << 20, max_rss="100M")
    check(isinstance(e, MemoryError), "400 MB under 100M: %s" % e)
    check(lg.run_isolated(touch, 20 << 20, max_rss="100M") == 20 << 20, "20 MB under 100M runs")
    check(lg.run_isolated(lambda: 1, max_rss=0) == 1, "max_rss=0: no budget")


def case_timeout():
    def spin():
        while True:
            pass

    e = expect(lg.IsolationTimeout, spin, timeout=0.5)
    check(isinstance(e, TimeoutError), "endless loop: %s" % e)
    import ctypes

    e = expect(lg.IsolationCrash, ctypes.string_at, 0)
    check(e.signame == "SIGSEGV" and "SIGSEGV" in str(e), "segfault: %s" % e)

    def bad():
        raise KeyError("nope")

    e = expect(KeyError, bad)
    check(e.args == ("nope",), "the handler's KeyError is re-raised: %r" % (e,))

    @lg.isolated(timeout=10)
    def double(x):
        return x * 2

    check(double(21) == 42 and double.__name__ == "double", "decorator form")
    check(lg.isolated(max_rss="1G")(lambda a, b=0: a + b)(1, b=2) == 3, "call form")
    try:
        lg.isolated(max_rss="lots")
        check(False, "a bad size is refused")
    except ValueError:
        check(True, "a bad size is refused")


def case_threads():
    out, errs = {}, []

    def worker(k):
        try:
            for i in range(15):
                r = lg.run_isolated(lambda a, b: (a, b, threading.get_ident() != 0), k, i, timeout=30)
                out[(k, i)] = r
        except BaseException as e:  # noqa: B902
            errs.append(e)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errs, "no errors: %r" % errs[:1])
    check(all(out.get((k, i)) == (k, i, True) for k in range(4) for i in range(15)), "60 answers, each its own")


def case_torch():
    import torch

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
    x = torch.randn(256, 128)

    def infer(inp):
        with torch.no_grad():
            return model(inp)

    want = infer(x)
    for i in range(2):
        got = lg.run_isolated(infer, x, timeout=120)
        check(torch.equal(got, want), "isolated output %d identical to in-process" % i)
    check(torch.equal(infer(x), want) and torch.get_num_threads() == 2, "the caller's torch is unharmed")


def case_run():
    script = (
        "import sys, os, socket\n"
        "sys.path.insert(0, %r)\n"
        "import leakguard as lg\n"
        "assert lg.run_isolated(lambda: os.getpid()) != os.getpid()\n"
        "try:\n"
        "    lg.run_isolated(lambda: socket.socket())\n"
        "    sys.exit(3)\n"
        "except lg.IsolationViolation as e:\n"
        "    assert e.syscall == 'socket', e\n"
        "print('isolated under run: ok')\n" % args.pydir
    )
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "s.py")
        with open(p, "w") as f:
            f.write(script)
        r = subprocess.run(
            [args.leakguard, "run", "-q", "-o", os.path.join(d, "r.db"), "--", sys.executable, p],
            capture_output=True,
            text=True,
            timeout=120,
        )
    check(r.returncode == 0 and "isolated under run: ok" in r.stdout, "under leakguard run: rc %d %s %s" %
          (r.returncode, r.stdout[-300:], r.stderr[-600:]))


def touch_mb(n):
    b = bytearray(n << 20)
    b[::4096] = b"\1" * len(b[::4096])
    return n


def raise_value_error(msg):
    raise ValueError(msg)


def make_socket():
    import socket

    return socket.socket()


def spin():
    while True:
        pass


def whoami(k, i):
    return (k, i, os.getpid())


def cgroups_left():
    how, where = lg.isolate_budget_method()
    if how != "cgroup":
        return 0
    mine = "leakguard-iso-%d-" % os.getpid()
    return len([d for d in os.listdir(where) if d.startswith(mine)])


def case_pool():
    import time

    n = int(os.environ.get("LG_ISOLATE_STATE_N", "500"))
    pool = lg.IsolatedPool(4, handler=append_mib, max_rss="64M")
    check(pool.ready() >= 1, "the pool has a child ready when made")
    for i in range(5):  # warm-up, as in case_state
        pool(-1)
    before = rss()
    bad = [r for r in (pool(i) for i in range(n)) if r[1:] != (0, 1)]
    grew = rss() - before
    check(not bad, "%d pooled requests each saw the pristine state (first bad: %r)" % (n, bad[:1]))
    check(HISTORY == [] and grew <= 10 << 20, "caller untouched, RSS grew %.1f MB (<= 10 MB)" % (grew / 1e6))
    e = None
    try:
        pool.call(raise_value_error, "from the child")
    except ValueError as x:
        e = x
    check(e is not None and e.args == ("from the child",), "the handler's ValueError is re-raised: %r" % (e,))
    try:
        pool.call(touch_mb, 300)
        check(False, "300 MB under 64M")
    except lg.MemoryBudgetExceeded as x:
        check(isinstance(x, MemoryError), "300 MB under a 64M budget: %s" % x)
    check(pool.call(touch_mb, 16) == 16, "16 MB under 64M runs")
    try:
        pool.call(make_socket)
        check(False, "socket() in a pooled child")
    except lg.IsolationViolation as x:
        check(x.syscall == "socket", "socket() in a pooled child: %s" % x)
    import pickle

    calls = sum(lg.isolate_stats()["requests"].values())
    try:
        pool.call(lambda: 1)
        check(False, "a lambda cannot be sent")
    except (pickle.PicklingError, AttributeError, TypeError) as x:  # pickle's, by version
        check(sum(lg.isolate_stats()["requests"].values()) == calls,
              "a lambda is refused here, no child asked: %s" % type(x).__name__)
    out, errs = {}, []

    def worker(k):
        try:
            for i in range(25):
                out[(k, i)] = pool.call(whoami, k, i)
        except BaseException as x:  # noqa: B902
            errs.append(x)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    pids = {v[2] for v in out.values()}
    check(not errs and all(out.get((k, i), (0, 0))[:2] == (k, i) for k in range(4) for i in range(25)),
          "100 calls from 4 threads, each answer its own (errors: %r)" % errs[:1])
    check(len(pids) == 100 and os.getpid() not in pids, "each in a child of its own")
    pool.close()
    try:
        pool(1)
        check(False, "a closed pool refuses calls")
    except ValueError:
        check(True, "a closed pool refuses calls")
    with lg.IsolatedPool(1, timeout=0.5) as tp:
        try:
            tp.call(spin)
            check(False, "an endless loop in a pooled child")
        except lg.IsolationTimeout as x:
            check(True, "an endless loop in a pooled child: %s" % x)
    with lg.IsolatedPool(1, handler=append_mib, reuse=5) as rp:
        seen = [rp(i)[1] for i in range(10)]
    # the first child serves 5, then a fresh one (or, while none is ready yet, a call's own)
    check(seen[:6] == [0, 1, 2, 3, 4, 0] and max(seen) <= 4,
          "reuse=5: a child serves 5 requests, its state its own: %r" % seen)

    @lg.isolated(pool=2, max_rss="100M")
    def double(x):
        return (x * 2, os.getpid())

    a, b = double(21), double(5)
    check(a[0] == 42 and b[0] == 10 and os.getpid() not in (a[1], b[1]), "isolated(pool=2) decorator")
    double.pool[0].close()
    left = cgroups_left()
    for _ in range(100):  # a child that answered is reaped by the next call
        if left == 0:
            break
        time.sleep(0.02)
        lg.run_isolated(int)
        left = cgroups_left()
    check(left == 0, "no cgroup of this process left (%s)" % (lg.isolate_budget_method(),))


globals()["case_" + args.case]()
