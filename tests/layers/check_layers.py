#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Builds each layer probe of tests/layers/CMakeLists.txt and checks the data flow:
a probe marked ok (the layer may include that header) must compile; a probe marked
fail (an include against the data flow) must fail, and fail because the header is not
on the layer's include path ("No such file or directory"), not for another reason.

  check_layers.py --build BUILD_DIR [--note TEXT] TARGET:HEADER:ok|fail ...
"""
import argparse
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--note", action="append", default=[], help="a line to print first (probes not run)")
    ap.add_argument("probes", nargs="+")
    a = ap.parse_args()
    for n in a.note:
        print("NOTE " + n)
    bad = 0
    for p in a.probes:
        target, header, want = p.split(":")
        r = subprocess.run(["cmake", "--build", a.build, "--target", target],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = r.stdout
        if want == "ok":
            good = r.returncode == 0
            why = "allowed include compiles"
        else:
            good = r.returncode != 0 and ("%s: No such file or directory" % header) in out
            why = "include against the data flow is a build error"
        print("  %s %-40s %s (%s)" % ("ok  " if good else "FAIL", target, header, why))
        if not good:
            bad += 1
            print("    " + "\n    ".join(out.strip().splitlines()[-8:]))
    print("%d probes, %d wrong" % (len(a.probes), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
