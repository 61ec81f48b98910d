#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The end of scripts/test.sh's output: per phase, how many tests ran, passed, failed
or were skipped and their summed time; then the 10 slowest tests of all phases.

  scripts/test-times.py build/test-times/*.xml     (ctest --output-junit files)
"""
import os
import sys
import xml.etree.ElementTree as ET


def main(paths):
    rows = []
    for path in paths:
        if not os.path.exists(path):
            continue
        phase = os.path.splitext(os.path.basename(path))[0]
        try:
            cases = ET.parse(path).getroot().iter("testcase")
        except ET.ParseError as e:
            print("   %s: unreadable (%s)" % (path, e))
            continue
        n = {"run": 0, "fail": 0, "skipped": 0, "s": 0.0}
        for c in cases:
            t = float(c.get("time") or 0)
            status = c.get("status") or ("fail" if c.find("failure") is not None else "run")
            n["s"] += t
            if status == "fail" or c.find("failure") is not None:
                n["fail"] += 1
            elif status in ("notrun", "disabled") or c.find("skipped") is not None:
                n["skipped"] += 1
            n["run"] += 1
            rows.append((t, phase, c.get("name")))
        print("== %s: %d tests, %d failed, %d skipped, %.0f test-seconds" % (
            phase, n["run"], n["fail"], n["skipped"], n["s"]))
    if rows:
        print("== the 10 slowest tests")
        for t, phase, name in sorted(rows, reverse=True)[:10]:
            print("   %7.1f s  %-8s %s" % (t, phase, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
