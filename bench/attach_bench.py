#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`leakguard attach` figures (issue #14, BENCHMARKS.md "Attach").

usage: attach_bench.py BUILD_DIR [--cycles 50] [--window 3] [--sample 512k]

On build/tests/attach_target (3 threads churning malloc/free, malloc_trim and
dlopen/dlclose loops, thread churn): N attach/detach cycles (no hang, no crash, the
target's progress keeps moving), the stop times they print (p50, p95), and the churn
rate (the target's progress counter) bare, attached in sampled mode and after detach,
as ratios measured in the same run, and the agent's memory (target VmRSS).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def progress(prog):
    for _ in range(100):
        try:
            with open(prog) as f:
                parts = f.read().split()
            if len(parts) == 2:
                return int(parts[1])
        except (OSError, ValueError):
            pass
        time.sleep(0.005)
    raise SystemExit("no progress line")


def rate(prog, window):
    a, t = progress(prog), time.monotonic()
    time.sleep(window)
    return (progress(prog) - a) / (time.monotonic() - t)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--sample", default="512k")
    a = ap.parse_args()
    cli = os.path.join(a.build, "bin", "leakguard")
    target = os.path.join(a.build, "tests", "attach_target")
    with tempfile.TemporaryDirectory(prefix="lg-attach-bench-") as d:
        prog = os.path.join(d, "prog")
        p = subprocess.Popen([target, prog])
        try:
            progress(prog)
            time.sleep(0.5)
            stopped, loading = [], []
            last = progress(prog)
            for i in range(a.cycles):
                r = subprocess.run([cli, "attach", "--duration", "0.2", "-o", os.path.join(d, "c.db"),
                                    str(p.pid)], capture_output=True, text=True, timeout=120)
                m = re.search(r"all threads stopped ([\d.]+) ms, loading thread ([\d.]+) ms", r.stderr)
                if r.returncode != 0 or not m or p.poll() is not None:
                    raise SystemExit("cycle %d failed: rc %d %s" % (i, r.returncode, r.stderr))
                stopped.append(float(m.group(1)))
                loading.append(float(m.group(2)))
                now = progress(prog)
                if now <= last:
                    time.sleep(0.2)
                    now = progress(prog)
                    if now <= last:
                        raise SystemExit("cycle %d: no progress" % i)
                last = now
            print("cycles: %d attach/detach, target alive and progressing" % a.cycles)
            print("all threads stopped: p50 %.1f ms, p95 %.1f ms, max %.1f ms" %
                  (statistics.median(stopped), pct(stopped, 0.95), max(stopped)))
            print("loading thread stopped: p50 %.1f ms, p95 %.1f ms, max %.1f ms" %
                  (statistics.median(loading), pct(loading, 0.95), max(loading)))
            # churn: bare (after all the cycles: the agent is loaded, detached), attached, after
            bare = rate(prog, a.window)
            rss0 = rss_kib(p.pid)
            att = subprocess.Popen([cli, "attach", "--duration", str(a.window + 3), "-s", a.sample, "-q", "-o",
                                    os.path.join(d, "s.db"), str(p.pid)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            time.sleep(1.5)
            during = rate(prog, a.window)
            rss1 = rss_kib(p.pid)
            att.wait(timeout=120)
            time.sleep(0.5)
            after = rate(prog, a.window)
            print("churn rate (progress/s): bare %.0f, attached -s %s %.0f, after detach %.0f" %
                  (bare, a.sample, during, after))
            print("slowdown attached: %.2fx; after detach: %.3fx" % (bare / during, bare / after))
            print("target VmRSS: %d KiB before, %d KiB attached (+%d KiB)" % (rss0, rss1, rss1 - rss0))
        finally:
            p.kill()
            p.wait()


if __name__ == "__main__":
    sys.exit(main())
