#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A pure-Python program's speed before, during and after `leakguard attach` (issue #14,
BENCHMARKS.md "Attach", docs/attach.md "Small objects"). The program makes and drops two
40-byte objects per iteration (pymalloc, no freelist), keeps one in a hundred, and makes
one 1 KiB bytearray per 10 000 iterations (a malloc call: the injector's safe point); it
writes its own iterations per 0.5 s. Each of REPS rounds: 3 s bare, an attach of 6 s,
3 s after; the medians of the windows before, during (from 1 s after the attach's start
to 1.5 s before its end) and after, as ratios of before.

    bench/attach_py.py BUILD [REPS] [-- ATTACH OPTIONS...]     e.g. -- -s 512K
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

LOOP = r'''
import sys, time
class Node:
    __slots__ = ("next",)
    def __init__(self, nxt):
        self.next = nxt
out = open(sys.argv[1], "w", buffering=1)
n = 0
t0 = time.monotonic()
keep = []
while True:
    junk = bytearray(1024)
    for _ in range(10000):
        d = Node(Node(None))
        if n % 100 == 0:
            keep.append(Node(None))
        n += 1
    t = time.monotonic()
    if t - t0 >= 0.5:
        out.write("%f %d\n" % (t, n))
        n = 0
        t0 = t
'''


def main():
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    build = os.path.abspath(args[0] if args else "build")
    reps = int(args[1]) if len(args) > 1 else 3
    cli = os.path.join(build, "bin", "leakguard")
    tmp = tempfile.mkdtemp(prefix="lg-attach-py-")
    loop = os.path.join(tmp, "loop.py")
    with open(loop, "w") as f:
        f.write(LOOP)
    win = {"before": [], "attached": [], "after": []}

    def rates(path, a, b):
        out = []
        with open(path) as f:
            for line in f:
                t, n = line.split()
                if a <= float(t) <= b:
                    out.append(int(n) / 0.5)
        return out
    for rep in range(reps):
        rate = os.path.join(tmp, "rate%d.txt" % rep)
        p = subprocess.Popen(["/usr/bin/python3", loop, rate])
        try:
            time.sleep(3.0)
            t1 = time.monotonic()
            r = subprocess.run([cli, "attach", "-q", "--duration", "6", "-o", os.path.join(tmp, "a.db")] + extra +
                               [str(p.pid)], capture_output=True, text=True, timeout=120)
            t2 = time.monotonic()
            if r.returncode != 0:
                sys.exit("attach: rc %d %s" % (r.returncode, r.stderr))
            time.sleep(3.0)
            t3 = time.monotonic()
        finally:
            p.kill()
            p.wait()
        win["before"] += rates(rate, t1 - 2.5, t1)
        win["attached"] += rates(rate, t1 + 1.0, t2 - 1.5)
        win["after"] += rates(rate, t2 + 0.6, t3)
    base = statistics.median(win["before"])
    print("attach %s, %d rounds" % (" ".join(extra) or "(full mode)", reps))
    for k, v in win.items():
        m = statistics.median(v)
        print("%-9s %9.0f iterations/s  %.3fx slower than before  (%d windows)" % (k, m, base / m, len(v)))
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
