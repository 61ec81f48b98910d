#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Builds each layer probe of tests/layers/CMakeLists.txt and checks the data flow:
a probe marked ok (the layer may include that header) must compile; a probe marked
fail (an include against the data flow) must fail, and fail because the header is not
on the layer's include path ("No such file or directory"), not for another reason.

  check_layers.py --build BUILD_DIR [--note TEXT] TARGET:HEADER:ok|fail ...
"""
import argparse
import os
import re
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
    # One build of every probe (the target layer_probes; make -k: a failed probe does not
    # stop the others; one cmake --build per probe took 1-5 s apiece), its errors sorted
    # by probe.
    probes = [p.split(":") for p in a.probes]
    cmd = ["cmake", "--build", a.build, "-j", str(os.cpu_count() or 2), "--target", "layer_probes", "--", "-k"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    errors = {}
    for line in r.stdout.splitlines():
        m = re.search(r"/(layer_probe_\w+)\.c:\d+:\d+: (?:fatal )?error: (.*)", line)
        if m:
            errors.setdefault(m.group(1), []).append(m.group(2))
    bad = 0
    for target, header, want in probes:
        errs = errors.get(target, [])
        if want == "ok":
            good = not errs
            why = "allowed include compiles"
        else:
            good = any(e == "%s: No such file or directory" % header for e in errs)
            why = "include against the data flow is a build error"
        print("  %s %-40s %s (%s)" % ("ok  " if good else "FAIL", target, header, why))
        if not good:
            bad += 1
            print("    " + ("\n    ".join(errs) if errs else "(no error)"))
    if r.returncode != 0 and not any(w == "fail" for _, _, w in probes):
        bad += 1
        print("    the build failed:\n    " + "\n    ".join(r.stdout.strip().splitlines()[-8:]))
    print("%d probes, %d wrong" % (len(a.probes), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
