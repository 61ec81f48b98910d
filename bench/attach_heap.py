#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Does one attach leave the target's heap behaving differently? (BENCHMARKS.md, "Attach")

usage: attach_heap.py BUILD_DIR [--processes 12] [--nap futex] [--agent AGENT.so]

The churn program (tests/attach/target.c, ATTACH_CHURN_ONLY=1) keeps each of its three
threads' heap right at glibc's trim threshold: a few blocks allocated or freed in a
thread's arena by somebody else can tip that thread into trimming its heap and growing
it again on every few thousand frees, for good (madvise(MADV_DONTNEED) and page faults:
10-30 % slower). Each of PROCESSES fresh copies is attached once (`-s 512k`, 1 s); then
the page faults of each thread over one second are read (/proc/PID/task/TID/stat). A
copy counts when one of its threads faults more than 100 times a second (never before an
attach in these runs: 0-10 a second).
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attach_cost import Target, symbol_offset  # noqa: E402


def faults(t):
    r = {}
    for s in glob.glob("/proc/%d/task/*/stat" % t.p.pid):
        try:
            with open(s) as f:
                r[s.split("/")[4]] = int(f.read().rsplit(")", 1)[1].split()[7])
        except (OSError, ValueError, IndexError):
            pass
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--processes", type=int, default=12)
    ap.add_argument("--nap")
    ap.add_argument("--agent")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    binary = os.path.join(build, "tests", "attach_target")
    off = symbol_offset(binary, "progress")
    env = dict(os.environ)
    if a.agent:
        env["LEAKGUARD_AGENT"] = os.path.abspath(a.agent)
    bad = 0
    with tempfile.TemporaryDirectory(prefix="lg-attach-heap-") as d:
        for n in range(a.processes):
            t = Target(binary, d, "T%d" % n, off, a.nap)
            try:
                time.sleep(1)
                f0 = faults(t)
                time.sleep(1)
                f1 = faults(t)
                pre = max(f1[k] - f0.get(k, 0) for k in f1)
                r = subprocess.run([os.path.join(build, "bin", "leakguard"), "attach", "--duration", "1", "-s", "512k",
                                    "-q", "-o", os.path.join(d, "x.db"), str(t.p.pid)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if r.returncode != 0:
                    raise SystemExit("attach: rc %d: %s" % (r.returncode, r.stderr.strip()))
                time.sleep(0.3)
                f0 = faults(t)
                time.sleep(1)
                f1 = faults(t)
                post = max(f1[k] - f0.get(k, 0) for k in f1)
                bad += post > 100
                print("copy %d: most faults a second in one thread: %d before, %d after" % (n, pre, post),
                      flush=True)
            finally:
                t.kill()
    print("copies with a thread trimming after one attach: %d of %d" % (bad, a.processes))


if __name__ == "__main__":
    sys.exit(main())
