#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Latency of one isolated call from Python (issue #15, docs/isolate.md): p50 and p99
of 200 calls of a handler that allocates 1 MiB, with a caller of +0 and +1024 MiB
resident, through leakguard.IsolatedPool (4 children; each call waits, untimed, until
the pool is full again: the latency with a ready child) and run_isolated (a fork per
call). Budget 64M (a cgroup where one can be made: see the first line).

usage: isolate_py_bench.py BUILD/python [--calls N]"""
import sys
import time

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "build/python")
import leakguard as lg  # noqa: E402

N = int(sys.argv[sys.argv.index("--calls") + 1]) if "--calls" in sys.argv else 200
KEPT = []


def handler(i):
    KEPT.append(bytearray(1 << 20))
    return i


def main():
    print("budget enforced by: %s (%s)" % lg.isolate_budget_method())
    print("| caller | mode | p50 (us) | p99 (us) |\n|---|---|---|---|")
    for mb in (0, 1024):
        ballast = bytearray(mb << 20)
        ballast[::4096] = b"\1" * len(ballast[::4096])
        pool = lg.IsolatedPool(4, handler=handler, max_rss="64M")
        for i in range(5):  # warm-up
            pool(i)
            lg.run_isolated(handler, i)
        for name in ("pool of 4", "fork per call"):
            ts = []
            for i in range(N):
                while name != "fork per call" and pool.ready() < 4:
                    time.sleep(0.0002)
                t = time.perf_counter()
                if name == "fork per call":
                    lg.run_isolated(handler, i, max_rss="64M")
                else:
                    pool(i)
                ts.append(time.perf_counter() - t)
            ts.sort()
            print("| +%d MiB | %s | %.0f | %.0f |" % (mb, name, ts[N // 2] * 1e6, ts[min(N - 1, N * 99 // 100)] * 1e6))
        pool.close()
        del ballast


main()
