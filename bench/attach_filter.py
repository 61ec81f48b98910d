#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Sampled attach, one agent library against another (BENCHMARKS.md, "Attach"): the churn
program (tests/attach/target.c with ATTACH_CHURN_ONLY=1) bare, then attached with
`-s 512k` through LEAKGUARD_AGENT=A, then through B, alternately, ROUNDS times; the
slowdown bare / attached of each (progress counter over 2-s windows).

usage: attach_filter.py BUILD_DIR AGENT_A.so AGENT_B.so [ROUNDS]
"""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attach_bench import rate  # noqa: E402

build, agents = os.path.abspath(sys.argv[1]), sys.argv[2:4]
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
cli = os.path.join(build, "bin", "leakguard")
prog = "/tmp/attach_filter.%d" % os.getpid()
p = subprocess.Popen([os.path.join(build, "tests", "attach_target"), prog],
                     env=dict(os.environ, ATTACH_CHURN_ONLY="1"))
time.sleep(1)
res = {a: [] for a in agents}
try:
    for _ in range(rounds):
        for ag in agents:
            bare = rate(prog, 2)
            att = subprocess.Popen([cli, "attach", "--duration", "5", "-s", "512k", "-q", "-o", prog + ".db",
                                    str(p.pid)], env=dict(os.environ, LEAKGUARD_AGENT=os.path.abspath(ag)),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.5)
            during = rate(prog, 2)
            att.wait(timeout=60)
            time.sleep(0.3)
            res[ag].append(bare / during)
            print("%s %.2fx" % (ag, bare / during), flush=True)
finally:
    p.kill()
    p.wait()
for ag, v in res.items():
    print("%s: median %.2fx of %s" % (ag, statistics.median(v), ["%.2f" % x for x in v]))
