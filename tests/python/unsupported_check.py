#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A CPython the recorder has no layout for (issue #12): native frames only, and ONE line.

  unsupported_check.py --leakguard BUILD/bin/leakguard --pydir BUILD/python

Runs tests/python/pure_sessions.py under `leakguard run` with the newest CPython older
than 3.9 found at run time (3.8, 3.7, 3.6: tests/python/pyinterp.py; none: exit 77,
saying so). The run must succeed and find the leak, stderr must hold exactly one
`leakguard:` line, naming the version as not supported for Python frames (the recorder's;
the sitecustomize hook stays quiet), and no frame of the report may be a Python one.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pyinterp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--pydir", required=True)
    a = ap.parse_args()
    why = []
    for minor in ("3.8", "3.7", "3.6"):
        exe, how = pyinterp.find(minor)
        if exe:
            break
        why.append(how)
    else:
        print("SKIP: no CPython older than 3.9 to test with: " + "; ".join(why), flush=True)
        return 77
    print("CPython %s: %s" % (how, exe), flush=True)
    tmp = tempfile.mkdtemp(prefix="lgpy-unsupported-")
    db = os.path.join(tmp, "run.db")
    env = dict(os.environ, LG_PY_SECONDS="3", PYTHONMALLOC="malloc")
    env["PYTHONPATH"] = os.path.abspath(a.pydir)
    cmd = [a.leakguard, "run", "-q", "-i", "0.2", "-o", db, "--", exe,
           os.path.join(HERE, "pure_sessions.py")]
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=280)
    sys.stderr.write(r.stderr[-2000:])
    fails = []

    def check(cond, what, got=None):
        print(("  ok   " if cond else "  FAIL ") + what + ("" if cond else "  (got %r)" % (got,)),
              flush=True)
        if not cond:
            fails.append(what)

    check(r.returncode == 0, "exit status 0", r.returncode)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("leakguard:")]
    want = "leakguard: CPython %s is not supported for Python frames" % minor
    check(len(lines) == 1 and lines[0].startswith(want),
          "exactly one leakguard line, starting %r" % want, lines)
    rep = subprocess.run([a.leakguard, "report", db, "--format", "json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    check(rep.returncode == 0, "leakguard report", rep.stderr)
    if rep.returncode == 0:
        doc = json.loads(rep.stdout)
        check(doc.get("verdict") == "leak", "verdict leak (from native stacks)", doc.get("verdict"))
        py = [f for s in doc.get("suspects", []) for f in (s.get("frames") or [])
              if (f.get("file") or "").endswith(".py")]
        check(not py, "no Python frame in the report", py[:2])
    if fails:
        print("FAILED: %s (kept %s)" % ("; ".join(fails), tmp))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
