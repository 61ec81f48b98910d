#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Torture suite driver (issue #17). One case per ctest (label `torture`):

  1. the program runs bare and under `leakguard run`, both at once (each with a
     timeout: a hang fails the test, and the process groups are killed);
  2. both runs must give the same exit status and byte-identical standard output;
  3. where the program plants a leak, the report's rank-1 suspect is the planted line
     (and, for cases with a leaking child, the child's process has it too);
  4. children that the program reaped itself (posix_spawn, vfork+exec, fork, Python
     subprocess and multiprocessing) have their exit status in runs[].

  python3 torture.py --leakguard BUILD/bin/leakguard --bin BUILD/tests/torture \\
      --src tests/torture --case deepbind [--keep]
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import lgtest  # noqa: E402

PY = sys.executable
TIMEOUT = 40  # seconds per run; every program finishes in under 6 s bare
# "forks": the collector symbolizes each of the 200 short-lived children at its end
# (about 50 ms each here), so the recorded run takes 10-20 s on an idle machine.
SLOW = {"forks": 150}

# name: argv (list; "{bin}", "{src}", "{suid}" substituted), leak (file, marker) or
# None, children: [(exit_status, count)] expected among reaped children's runs,
# child_leak: the exit status of a child whose own run must have the planted leak,
# stderr_once: a text the recorded run's stderr must contain exactly once; lg_extra:
# options of `leakguard run`; runs: the number of runs[] entries expected.
C_LEAK = ("tt.h", "/* TT-LEAK */")
PY_LEAK_CR = ("tt_closerange.py", "# TT-PY-LEAK")
CASES = {
    "deepbind": dict(argv=["{bin}/tt_deepbind", "dlopen"], leak=C_LEAK,
                     stderr_once="RTLD_DEEPBIND): flag dropped"),
    "dlmopen_deepbind": dict(argv=["{bin}/tt_deepbind", "dlmopen"], leak=C_LEAK,
                             stderr_once="RTLD_DEEPBIND): flag dropped"),
    "newlm": dict(argv=["{bin}/tt_deepbind", "newlm"], leak=C_LEAK,
                  stderr_once="into another link-map namespace"),
    "libcbufs": dict(argv=["{bin}/tt_fine", "libcbufs"], leak=C_LEAK),
    "xfork": dict(argv=["{bin}/tt_fine", "_Fork"], leak=C_LEAK, children=[(4, 1)], child_leak=4),
    # --no-follow after close_range: the unrecorded child must stop writing into the
    # parent's region although the memfd descriptor is gone (anonymous pages instead).
    "close_range_nofollow": dict(argv=["{bin}/tt_closefds", "close_range"], leak=C_LEAK,
                                 lg_extra=["--no-follow"], runs=1),
    "libc_direct": dict(argv=["{bin}/tt_libc"], leak=("tt_libc.c", "/* TT-LEAK-LIBC */")),
    "dlsym_handle": dict(argv=["{bin}/tt_dlsym", "handle"], leak=C_LEAK),
    "dlsym_next": dict(argv=["{bin}/tt_dlsym", "next", "{bin}"], leak=C_LEAK),
    "close_range": dict(argv=["{bin}/tt_closefds", "close_range"], leak=C_LEAK,
                        children=[(7, 1)], child_leak=7),
    "close_range_spawn": dict(argv=["{bin}/tt_closefds", "close_range_spawn"], leak=C_LEAK,
                              children=[(8, 1)], child_leak=8),
    "tlocal": dict(argv=["{bin}/tt_tlocal"], leak=C_LEAK),
    "closefrom": dict(argv=["{bin}/tt_closefds", "closefrom"], leak=C_LEAK,
                      children=[(7, 1)], child_leak=7),
    "dup2": dict(argv=["{bin}/tt_closefds", "dup2"], leak=C_LEAK, children=[(7, 1)],
                 child_leak=7),
    "py_closerange": dict(argv=[PY, "{src}/tt_closerange.py"], leak=PY_LEAK_CR,
                          children=[(9, 1)], child_leak=9),
    "spawn": dict(argv=["{bin}/tt_spawn"], leak=C_LEAK, children=[(5, 1), (6, 1)]),
    "usable": dict(argv=["{bin}/tt_fine", "usable"], leak=C_LEAK),
    "aligned": dict(argv=["{bin}/tt_fine", "aligned"], leak=C_LEAK),
    "mallopt": dict(argv=["{bin}/tt_fine", "mallopt"], leak=C_LEAK),
    "signals": dict(argv=["{bin}/tt_fine", "signals"], leak=C_LEAK),
    "forks": dict(argv=["{bin}/tt_fine", "forks"], leak=C_LEAK,
                  children=[(k, 4) for k in range(50)]),
    # fork while another thread is inside libunwind (tt_forkunwind.c): the child must
    # not inherit its locks held; "stuck" outlasts the recorder's wait for it.
    "forkunwind": dict(argv=["{bin}/tt_forkunwind", "hold"], leak=C_LEAK, children=[(7, 1)],
                       stderr_once="holder inside dl_iterate_phdr"),
    "forkunwind_stuck": dict(argv=["{bin}/tt_forkunwind", "stuck"], leak=C_LEAK, runs=1,
                             stderr_once="holder inside dl_iterate_phdr"),
    "cancel": dict(argv=["{bin}/tt_fine", "cancel"], leak=C_LEAK),
    "altstack": dict(argv=["{bin}/tt_fine", "altstack"], leak=C_LEAK),
    "altstack8k": dict(argv=["{bin}/tt_fine", "altstack8k"], leak=C_LEAK),
    "altstack_min": dict(argv=["{bin}/tt_fine", "altstack_min"], leak=C_LEAK),
    "tlsdtor": dict(argv=["{bin}/tt_fine", "tlsdtor"], leak=C_LEAK),
    "deep": dict(argv=["{bin}/tt_fine", "deep"], leak=C_LEAK),
    "deep_user": dict(argv=["{bin}/tt_fine", "deep_user"], leak=C_LEAK),
    "threads": dict(argv=["{bin}/tt_fine", "threads"], leak=C_LEAK),
    "longjmp": dict(argv=["{bin}/tt_fine", "longjmp"], leak=C_LEAK),
    "unsetenv_spawn": dict(argv=["{bin}/tt_exec", "unsetenv_spawn"], leak=C_LEAK),
    "unsetenv_exec": dict(argv=["{bin}/tt_exec", "unsetenv_exec"], leak=C_LEAK),
    "setuid_spawn": dict(argv=["{bin}/tt_exec", "setuid_spawn", "{suid}"], leak=C_LEAK),
    "setuid_exec": dict(argv=["{bin}/tt_exec", "setuid_exec", "{suid}"], leak=C_LEAK),
    "py_subprocess": dict(argv=[PY, "{src}/tt_subprocess.py"],
                          leak=("tt_subprocess.py", "# TT-PY-LEAK"), children=[(3, 1)]),
    "py_forkserver": dict(argv=[PY, "{src}/tt_forkserver.py"],
                          leak=("tt_forkserver.py", "# TT-PY-LEAK"),
                          children=[(10, 1), (11, 1), (12, 1)]),
}


def extra(ap):
    ap.add_argument("--case", required=True, choices=sorted(CASES))


def run_both(t, bare, recorded, timeout):
    """Runs the bare and the recorded command at the same time (each lasts its leak's
    seconds, mostly asleep), each in its own process group: (rc, stdout, stderr) of
    each. A hang fails the test and kills both groups."""
    procs = []
    for argv in (bare, recorded):
        print("  $ %s" % " ".join(argv), flush=True)
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=t.tmp,
                                      start_new_session=True))
    results = [None, None]

    def wait(i):
        results[i] = procs[i].communicate()
    waiters = [threading.Thread(target=wait, args=(i,)) for i in (0, 1)]
    for w in waiters:
        w.start()
    end = time.monotonic() + timeout
    for i, w in enumerate(waiters):
        w.join(max(0.0, end - time.monotonic()))
        if w.is_alive():
            for p in procs:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for x in waiters:
                x.join()
            out, err = results[i]
            t.fatal("no hang: finishes within %d s" % timeout, argv=(bare, recorded)[i],
                    stdout=out.decode(errors="replace")[-2000:], stderr=err.decode(errors="replace")[-2000:])
    out = []
    for p, (o, e) in zip(procs, results):
        print("    -> %s: exit %d" % (p.args[0], p.returncode), flush=True)
        out.append((p.returncode, o, e.decode(errors="replace")))
    return out


def make_setuid(t):
    """A set-user-ID copy of id in the test's directory. As root it belongs to nobody,
    so the loader runs it in secure mode (AT_SECURE) and drops LD_PRELOAD; otherwise
    it is set-user-ID to ourselves, which still takes the recorder's exec path."""
    idp = shutil.which("id") or "/usr/bin/id"
    d = tempfile.mkdtemp(prefix="suid-", dir=os.path.dirname(os.path.abspath(t.args.bin)))
    os.chmod(d, 0o755)
    dst = os.path.join(d, "id-suid")
    shutil.copy(idp, dst)
    if os.geteuid() == 0:
        os.chown(dst, 65534, 65534)
    os.chmod(dst, 0o4755)
    t.cleanup_dirs.append(d)
    return dst


def py_function(site):
    """Python's name for the code object holding the site's line: the enclosing def,
    else <module> (lgtest's enclosing_function reads C)."""
    with open(site.path) as f:
        lines = f.read().split("\n")
    line = lines[site.line - 1]
    indent = len(line) - len(line.lstrip())
    for l in reversed(lines[:site.line - 1]):
        ind = len(l) - len(l.lstrip())
        if l.strip() and ind < indent:
            if l.lstrip().startswith("def "):
                return l.lstrip()[4:].split("(")[0]
            indent = ind
    return "<module>"


def main():
    args = lgtest.parse_args(extra)
    case = CASES[args.case]
    t = lgtest.Test("torture-%s" % args.case, args)
    t.cleanup_dirs = []
    subst = {"bin": args.bin, "src": args.src, "suid": ""}
    if any("{suid}" in a for a in case["argv"]):
        subst["suid"] = make_setuid(t)
    argv = [a.format(**subst) for a in case["argv"]]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)

    timeout = SLOW.get(args.case, TIMEOUT)
    db = t.path("run.db")
    lg = [args.leakguard, "run", "--quiet", "--output", db, "--interval", "0.1"]
    lg += case.get("lg_extra", []) + ["--"] + argv
    (rc_b, out_b, err_b), (rc_r, out_r, err_r) = run_both(t, argv, lg, timeout)
    t.check(rc_b == rc_r, "same exit status bare and recorded", bare=rc_b, recorded=rc_r,
            bare_stderr=err_b[-1500:], recorded_stderr=err_r[-1500:])
    t.check(out_b == out_r, "same standard output bare and recorded",
            bare=out_b.decode(errors="replace")[-1500:],
            recorded=out_r.decode(errors="replace")[-1500:])
    t.check(rc_b >= 0 and rc_b < 128, "the program is not killed by a signal", exit=rc_b)
    t.check("leakguard: internal" not in err_r and "never connected" not in err_r,
            "no leakguard error on stderr", stderr=err_r[-1500:])
    if case.get("stderr_once"):
        n = err_r.count(case["stderr_once"])
        t.check(n == 1, "stderr says '%s' exactly once" % case["stderr_once"], count=n,
                stderr=err_r[-1500:])
    for d in t.cleanup_dirs:
        shutil.rmtree(d, ignore_errors=True)

    rep = t.report_json(db)
    runs = rep["runs"]
    t.check(runs and runs[0].get("exit_status") == (rc_b if rc_b < 128 else None),
            "the target's run has its exit status", run=runs[:1], expected=rc_b)
    if case.get("runs"):
        t.check(len(runs) == case["runs"], "%d run(s) recorded" % case["runs"],
                runs=[(r.get("pid"), r.get("started_by"), r.get("end")) for r in runs])
    for status, count in case.get("children", []):
        got = [r for r in runs[1:] if r.get("exit_status") == status]
        t.check(len(got) >= count,
                "%d reaped child run(s) with exit status %d in runs[]" % (count, status),
                found=len(got), runs=[(r.get("pid"), r.get("command")[:60], r.get("started_by"),
                                       r.get("end"), r.get("exit_status")) for r in runs][:12])
    if case.get("leak"):
        site = t.site(*case["leak"])
        if site.path.endswith(".py"):
            site.function = py_function(site)
        sus = rep["suspects"]
        t.check_site(sus[0] if sus else {}, site,
                     "rank 1 is the planted leak %s" % site.describe())
        if case.get("child_leak") is not None:
            kids = [r["pid"] for r in runs[1:] if r.get("exit_status") == case["child_leak"]]
            hits = [s for s in sus if s.get("pid") in kids and site.matches((s.get("frames") or [{}])[0])]
            t.check(kids and hits, "the forked child's own leak is reported in its pid",
                    child_pids=kids, suspects=[(s.get("rank"), s.get("pid"), (s.get("frames") or [{}])[0])
                                               for s in sus][:8])
    t.finish()


if __name__ == "__main__":
    main()
