#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The holder of a long-running Python leak, found every time beside CPU hogs (issue
#30). Not a test: runs bench/activations_leak.py (an MLP keeping every activation in a
global list, SECONDS long) under `leakguard run` RUNS times beside HOGS busy processes
and counts the runs whose first leak is held by __main__.ACTIVATIONS; for the others it
prints what the report said instead (its no_holder, or the holder it named).

  bench/holders_under_load.py BUILD [--runs 10] [--hogs 2] [--seconds 27]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=27)
    a = ap.parse_args()
    lg = os.path.join(os.path.abspath(a.build), "bin", "leakguard")
    hog = "while True: pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(a.hogs)]
    found = 0
    try:
        for i in range(1, a.runs + 1):
            tmp = tempfile.mkdtemp(prefix="lg-holders-")
            db = os.path.join(tmp, "run.db")
            t0 = time.monotonic()
            r = subprocess.run([lg, "run", "-q", "-o", db, "--", "/usr/bin/python3",
                                os.path.join(HERE, "activations_leak.py"), str(a.seconds)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp)
            rep = subprocess.run([lg, "report", db, "--format", "json"], stdout=subprocess.PIPE, text=True)
            doc = json.loads(rep.stdout) if rep.returncode == 0 else {}
            leaks = doc.get("leaks") or []
            h = (leaks[0].get("holder") or {}) if leaks else {}
            chain = " -> ".join(h.get("chain") or [])
            ok = r.returncode == 0 and "__main__.ACTIVATIONS (list)" in chain
            found += ok
            why = "" if ok else " | no_holder: %s" % (leaks[0].get("no_holder") if leaks else "no leak")
            print("run %2d: %s  %.0f s  load %.1f  holder: %s%s" % (
                i, "found" if ok else "MISSED", time.monotonic() - t0, os.getloadavg()[0], chain or "-", why),
                flush=True)
    finally:
        for p in hogs:
            p.kill()
    print("holder found in %d of %d runs beside %d CPU hogs" % (found, a.runs, a.hogs))
    return 0 if found == a.runs else 1


if __name__ == "__main__":
    sys.exit(main())
