# SPDX-License-Identifier: MIT
"""What wrappers and short-lived helpers cost under `leakguard run` (issue #35 item 2):
the wall time of a command bare and recorded, interleaved, medians of --reps; ratios
to bare measured in the same run. Not a test.

  python3 bench/wrappers.py [--reps 5] [--modes bare,full,sampled] [--lg NAME=BUILD ...]
                            [--only SUBSTRING] [--pin]

Commands: `python3 -c pass` through a pyenv shim (skipped without pyenv), the same
through /usr/bin/python3 directly and through `bash -c`, a bash loop starting 30 `bash
-c :`, and 30 subshells `( : )`. Modes: bare, full, sampled (`-s 512K`), lazyoff (full
with `--lazy off`: every image recorded from its start), preload (no recording at all:
libleakguard.so preloaded with no collector to reach, the floor of any recording that
preloads it); `MODE@NAME` uses the leakguard of another build (--lg
NAME=path/to/build). Each recorded run writes a fresh database in a temporary
directory. --only keeps the commands whose label contains SUBSTRING (e.g. "shim");
--pin runs leakguard on CPU 0 and the command on CPU 1 (`taskset`), bare on CPU 1: the
collector's CPU then never competes with the program's.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commands():
    cmds = []
    shim = os.path.expanduser("~/.pyenv/shims/python3")
    if os.path.exists(shim):
        cmds.append(("pyenv shim: python3 -c pass", [shim, "-c", "pass"]))
    cmds.append(("/usr/bin/python3 -c pass", ["/usr/bin/python3", "-c", "pass"]))
    cmds.append(("bash -c '/usr/bin/python3 -c pass'", ["bash", "-c", "/usr/bin/python3 -c pass"]))
    cmds.append(("bash: 30 x bash -c :", ["bash", "-c", "for i in $(seq 30); do bash -c :; done"]))
    cmds.append(("bash: 30 subshells ( : )", ["bash", "-c", "for i in $(seq 30); do ( : ); done"]))
    return cmds


def run_once(mode, builds, tmp, argv, n, pin=False):
    pre = []
    env = None
    kind, _, name = mode.partition("@")
    if kind == "preload":
        env = dict(os.environ, LD_PRELOAD=os.path.join(builds[name or "this"], "lib", "libleakguard.so"))
    elif mode != "bare":
        lg = os.path.join(builds[name or "this"], "bin", "leakguard")
        pre = [lg, "run", "-q", "-o", os.path.join(tmp, "r%d.db" % n)]
        if kind == "sampled":
            pre += ["-s", "512K"]
        if kind == "lazyoff":
            pre += ["--lazy", "off"]
        pre += ["--"]
    if pin:
        pre = (["taskset", "-c", "0"] + pre if pre else []) + ["taskset", "-c", "1"]
    t0 = time.monotonic()
    r = subprocess.run(pre + argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit("wrappers.py: %s failed (%d): %s" % (" ".join(pre + argv), r.returncode, r.stderr.strip()[-300:]))
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--modes", default="bare,full,sampled")
    ap.add_argument("--lg", action="append", default=[], help="NAME=BUILD_DIR")
    ap.add_argument("--only", default="", help="only the commands whose label contains this")
    ap.add_argument("--pin", action="store_true", help="leakguard on CPU 0, the command on CPU 1")
    a = ap.parse_args()
    builds = {"this": os.path.join(ROOT, "build")}
    for x in a.lg:
        k, _, v = x.partition("=")
        builds[k] = v
    modes = a.modes.split(",")
    tmp = tempfile.mkdtemp(prefix="lg-wrappers-")
    n = 0
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg())
    try:
        for label, argv in commands():
            if a.only not in label:
                continue
            times = {m: [] for m in modes}
            for _ in range(a.reps):
                for m in modes:  # interleaved: each round runs every mode once
                    n += 1
                    times[m].append(run_once(m, builds, tmp, argv, n, a.pin))
            base = statistics.median(times["bare"]) if "bare" in times else None
            cells = []
            for m in modes:
                med = statistics.median(times[m])
                ratio = " (%.2fx)" % (med / base) if base and m != "bare" else ""
                cells.append("%s %.3f s%s" % (m, med, ratio))
            print("%-28s %s" % (label, "  ".join(cells)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
