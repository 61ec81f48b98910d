#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""SIGKILL: churn_leak is killed with SIGKILL while recording. leakguard must exit
promptly with 137 (128 + 9), record the signal, keep what it had recorded (the
database opens, the planted leak is still rank 1) and not leave the target's
process behind.
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402


def extra(ap):
    ap.add_argument("--kill-after", type=float, default=1.0,
                    help="at least this many seconds, and the leak flagged, before the kill")


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("sigkill", args)
    exe = t.bin("churn_leak")
    site = t.site("churn_leak.c")
    db, pidfile = t.path("run.db"), t.path("target.pid")
    argv = [args.leakguard, "run", "--quiet", "--output", db, "--interval", args.interval,
            "--", exe, "--seconds", "60", "--pidfile", pidfile]
    print("  $ %s" % " ".join(argv), flush=True)
    lg = subprocess.Popen(argv, cwd=t.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, errors="replace")
    pid_s = lgtest.wait_for_file(pidfile, 20)
    if not pid_s:
        lg.kill()
        out, err = lg.communicate()
        t.fatal("target started and wrote its pid file", stdout=out[-2000:], stderr=err[-2000:])
    tpid = int(pid_s)
    # killed once the live analysis flagged the leak (an event in the database), after
    # at least --kill-after seconds
    t_start = time.monotonic()
    flagged = lgtest.wait_for_db(db, "SELECT count(*) FROM flags", 60)
    time.sleep(max(0.0, args.kill_after - (time.monotonic() - t_start)))
    t.check(flagged is not None, "the leak is flagged while the target runs (a row in flags)")
    ran = time.monotonic() - t_start
    print("  kill -9 %d" % tpid, flush=True)
    os.kill(tpid, signal.SIGKILL)
    t0 = time.monotonic()
    try:
        out, err = lg.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        lg.kill()
        out, err = lg.communicate()
        t.fatal("leakguard exits within 30 s of the target's death", stderr=err[-2000:])
    took = time.monotonic() - t0
    print("    -> exit %d, %.1fs after the kill" % (lg.returncode, took), flush=True)
    t.check(lg.returncode == 137, "leakguard exits 137 (128 + SIGKILL)", exit=lg.returncode,
            stderr=err[-2000:])
    t.check(took < 10, "leakguard exits promptly (< 10 s)", seconds=took)
    try:
        os.kill(tpid, 0)
        t.check(False, "target process is gone", pid=tpid)
    except ProcessLookupError:
        t.check(True, "target process is gone")
    rep = t.report_json(db)
    runs = rep["runs"]
    t.check(len(runs) == 1 and runs[0].get("pid") == tpid, "one run, the target's pid",
            runs=runs, target_pid=tpid)
    if runs:
        t.check(runs[0].get("signal") == 9, "runs[0].signal == 9", run=runs[0])
        t.check(runs[0].get("duration_s") is not None
                and ran * 0.8 <= runs[0]["duration_s"] <= ran + 15,
                "runs[0].duration_s covers the time until the kill", run=runs[0])
        t.check((runs[0].get("final_live_bytes") or 0) > 0, "final live bytes recorded",
                run=runs[0])
    t.check(rep["verdict"] == "leak" and rep["suspects"], "verdict is leak",
            verdict=rep["verdict"])
    if rep["suspects"]:
        t.check_site(rep["suspects"][0], site, "rank-1 suspect is the planted site " + site.describe())
    # The text report must also work on this database.
    p = t.run([args.leakguard, "report", db])
    t.check(p.returncode == 0 and p.stdout.strip(), "text report works on the database",
            exit=p.returncode, stderr=p.stderr[-1000:])
    t.finish()


if __name__ == "__main__":
    main()
