#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Does sampled mode keep full mode's findings? (issue #32, item 5). Not a test.

  bench/sampled_findings.py [--build DIR] [--sample 512K] [--seconds 5] [--reps 1]

Runs every detection scenario of tests/scenarios (the leaks, each with one
/* LEAK-SITE */ line, and the healthy controls) under `leakguard run --fail-on-leak`,
in full mode and with `-s SAMPLE`, and prints a markdown table: per scenario and mode,
the verdict, whether the rank-1 suspect is the planted line (first frame outside the
C++ standard library), that suspect's site, and when the leak was flagged
(`leaks[0].detected_after_s`, seconds after the run began). With --reps N each cell
counts the runs that agree (e.g. "leak 3/3").
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "scenarios")

# scenario, source with the LEAK-SITE line (None: a healthy control), extra arguments
SCENARIOS = [
    ("churn_leak", "churn_leak.c", []),
    ("lru_leak", "lru_leak.c", []),
    ("mt_shlib", "codec.c", []),
    ("config_reload", "config_reload.c", []),
    ("cxx_sessions", "cxx_sessions.cpp", []),
    ("cxx_cycle", "cxx_cycle.cpp", []),
    ("late_leak", "late_leak.c", ["--start", "2"]),
    ("cxx_queue", None, []),
    ("lru_bounded", None, []),
    ("sawtooth", None, []),
    ("startup_tables", None, []),
    ("first_use", None, []),
]


def planted(src):
    with open(os.path.join(SRC, src)) as f:
        for i, line in enumerate(f, 1):
            if line.rstrip().endswith("/* LEAK-SITE */"):
                return os.path.basename(src), i
    sys.exit(f"sampled_findings: no LEAK-SITE line in {src}")


def std_frame(fr):
    f = fr.get("file") or ""
    return "/c++/" in f or "libstdc++" in (fr.get("module") or "") or f.startswith("/usr/include/")


def one(args, name, extra, sample, tmp):
    db = os.path.join(tmp, f"{name}-{sample or 'full'}.db")
    cmd = [os.path.join(args.build, "bin", "leakguard"), "run", "-q", "--force", "--fail-on-leak", "-o", db]
    if sample:
        cmd += ["-s", sample]
    cmd += ["--", os.path.join(args.build, "tests", "scenarios", name), "--seconds", str(args.seconds)] + extra
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    out = subprocess.run([os.path.join(args.build, "bin", "leakguard"), "report", db, "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    rep = json.loads(out)
    sus = rep.get("suspects") or []
    site = None
    if sus:
        frames = [f for f in sus[0].get("frames") or [] if not std_frame(f)]
        if frames:
            f0 = frames[0]
            site = (os.path.basename(f0.get("file") or "?"), f0.get("line"), f0.get("function") or "?")
    leaks = rep.get("leaks") or []
    return rep.get("verdict"), site, leaks[0].get("detected_after_s") if leaks else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--sample", default="512K")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    print(f"sampled_findings: each scenario {args.seconds} s, full against -s {args.sample}, {args.reps} run(s) "
          f"each; load average {load0:.2f} at the start\n")
    print("| scenario | planted | full: verdict, rank-1 site, flagged after | "
          f"-s {args.sample}: verdict, rank-1 site, flagged after |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, src, extra in SCENARIOS:
            want = planted(src) if src else None
            cells = []
            for sample in (None, args.sample):
                results = [one(args, name, extra, sample, tmp) for _ in range(args.reps)]
                good = 0
                for verdict, site, _ in results:
                    if want:
                        good += verdict == "leak" and site is not None and site[:2] == want
                    else:
                        good += verdict == "no-leak"
                verdict, site, det = results[-1]
                s = f"{site[0]}:{site[1]} {site[2]}" if site else "none"
                d = f"{det:.1f} s" if isinstance(det, (int, float)) else "-"
                mark = f"{good}/{args.reps} as expected"
                cells.append(f"{verdict}, {s}, {d} ({mark})")
                print(f"# {name} {'full' if not sample else sample}: {cells[-1]}", file=sys.stderr, flush=True)
            where = f"{want[0]}:{want[1]}" if want else "none (healthy)"
            print(f"| {name} | {where} | {cells[0]} | {cells[1]} |")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
