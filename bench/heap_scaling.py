#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The recorder's cost per malloc/free pair against the size of the live heap (issue #32).
Not a test. For each live-heap size N, runs bench/heap_scaling (N live blocks of 64 B,
then PAIRS malloc/free pairs, timed alone) bare, under `leakguard run` in full mode and
sampled (-s 512K), interleaved (round 1 of every mode, then round 2, ...), and prints
the medians: ns per pair, the extra over bare, the ratio to bare, and the load average.

  bench/heap_scaling.py [--build DIR] [--lg DIR] [--sizes 1e4,1e5,1e6,1e7] [--reps 5]
                        [--pairs 5000000] [--pattern evict|ring|both] [--chase]
                        [--modes bare,full,sampled,preload]

Patterns: `evict` frees a random block of the live heap and allocates its replacement
(every pair touches cold memory, as a cache's evictions do); `ring` frees a block 64
allocations old (the pairs stay in cache: the hook's own cost). --chase makes each pick
wait for the previous pick's block, so that no two misses overlap, bare or recorded:
what is left of the extra cost is then the hook's work, not lost overlap.
Mode `preload` is libleakguard.so with no collector (every call passed through).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(args, mode, n, pattern, tmp):
    hs = os.path.join(args.build, "bench", "heap_scaling")
    cmd = [hs, "--live", str(n), "--pairs", str(args.pairs)]
    if pattern == "evict":
        cmd += ["--replace", "1"]
    if args.chase:
        cmd += ["--chase", "1"]
    env = dict(os.environ)
    mode, _, lgdir = mode.partition("@")
    lgdir = lgdir or args.lg
    if mode in ("full", "sampled"):
        lg = [os.path.join(lgdir, "bin", "leakguard"), "run", "-q", "--force", "-o", os.path.join(tmp, "hs.db")]
        if mode == "sampled":
            lg += ["-s", "512K"]
        cmd = lg + ["--"] + cmd
    elif mode == "preload":
        env["LD_PRELOAD"] = os.path.join(lgdir, "lib", "libleakguard.so")
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    m = re.search(r"ns_per_pair=([0-9.]+)", out)
    if not m:
        sys.exit(f"heap_scaling: no result from {' '.join(cmd)}: {out!r}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--lg", help="the build whose leakguard and libleakguard.so to measure (default: --build); "
                    "the benchmark programs still come from --build; a mode written MODE@DIR uses DIR's")
    ap.add_argument("--sizes", default="1e4,1e5,1e6,1e7")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=5000000)
    ap.add_argument("--pattern", default="evict", choices=["evict", "ring", "both"])
    ap.add_argument("--chase", action="store_true")
    ap.add_argument("--modes", default="bare,full,sampled")
    args = ap.parse_args()
    args.lg = args.lg or args.build
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    modes = args.modes.split(",")
    if "bare" not in modes:
        modes.insert(0, "bare")
    patterns = ["evict", "ring"] if args.pattern == "both" else [args.pattern]
    load0 = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for pattern in patterns:
            for n in sizes:
                res = {m: [] for m in modes}
                for _ in range(args.reps):
                    for m in modes:
                        res[m].append(run_once(args, m, n, pattern, tmp))
                med = {m: statistics.median(v) for m, v in res.items()}
                rows.append((pattern, n, med, os.getloadavg()[0]))
                cells = "  ".join(
                    f"{m} {med[m]:.0f} ({med[m] - med['bare']:+.0f}, {med[m] / med['bare']:.2f}x)" for m in modes[1:]
                )
                print(f"# {pattern} N={n:.0e}: bare {med['bare']:.0f} ns/pair  {cells}", file=sys.stderr, flush=True)
    print(f"heap_scaling: {args.pairs} pairs, median of {args.reps} interleaved runs, "
          f"{'chased (no overlapping misses)' if args.chase else 'free-running'}; load average "
          f"{load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, {os.cpu_count()} CPUs\n")
    head = "| pattern | live blocks | bare ns/pair | " + " | ".join(f"{m}: ns/pair over bare (ratio)" for m in modes[1:])
    print(head + " | load |")
    print("|" + "---|" * (4 + len(modes) - 1))
    for pattern, n, med, load in rows:
        cells = " | ".join(f"{med[m] - med['bare']:+.0f} ({med[m] / med['bare']:.2f}×)" for m in modes[1:])
        print(f"| {pattern} | {n:.0e} | {med['bare']:.0f} | {cells} | {load:.1f} |")


if __name__ == "__main__":
    main()
