#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""leakguard keeps CPython's pymalloc and wraps it (src/capture/pymalloc.c), in one
CPython (--python 3.X, found at run time; absent: exit 77, saying which).

The program keeps N empty lists made on one line (KEPT-LINE: a 56-byte request each,
GC header included, well under pymalloc's 512) and says whether the recorder wrapped
pymalloc, what PYTHONMALLOC was, and how many of its lists carry a recorded site. Runs:
  -s 4K: PYTHONMALLOC unset, pymalloc wrapped; about N x 56 / 4096 lists sampled (a
    Poisson count of mean ~1 370 for N = 100 000: the bounds below are > 10 standard
    deviations wide), and the report's site at KEPT-LINE estimates N x 56 bytes;
  full mode: PYTHONMALLOC unset, pymalloc wrapped, every new list recorded inside
    pymalloc's pools (CPython's list free list hands back at most 80 older ones), and
    the report's site at KEPT-LINE holds their bytes once (not the arenas as well);
  -s 4K with the user's PYTHONMALLOC=malloc: left as it is (not wrapped: its bytes would
    count twice), still sampled through malloc;
  -s 4K with PYTHONMALLOC=pymalloc_debug: left as it is (the debug hooks would check their
    own header on our blocks), and the program runs to its end.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77
N = 100000

MAIN = """\
import ctypes, json, os
import leakguard as lg
wrapped = ctypes.PyDLL(None).lg_python_wrap()
KEPT = [[] for _ in range(%d)]  # KEPT-LINE
headed = sum(lg._site_of_object(o) is not None for o in KEPT)
print(json.dumps({"recording": lg.snapshot()["recording"], "wrapped": wrapped,
                  "pythonmalloc": os.environ.get("PYTHONMALLOC"), "headed": headed}), flush=True)
os._exit(0)  # nothing freed at exit: the report's live bytes are the program's
""" % N
KEPT_LINE = 4


def main():
    sys.path.insert(0, HERE)
    import pyinterp
    a, python = pyinterp.check_script_args(__doc__)
    if not python:
        return SKIP
    tmp, script, env = pyinterp.script_case("lgpy-pymalloc-", a.pydir, MAIN)
    checks = pyinterp.Checks()
    check = checks.check

    def run(name, extra, pythonmalloc=None):
        db = os.path.join(tmp, name + ".db")
        e = dict(env, PYTHONMALLOC=pythonmalloc) if pythonmalloc else env
        cmd = [a.leakguard, "run", "-q", "-o", db] + extra + ["--", python, script]
        print("$ %s%s" % ("PYTHONMALLOC=%s " % pythonmalloc if pythonmalloc else "", " ".join(cmd)), flush=True)
        r = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                           timeout=240)
        out = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and r.stdout.strip() else None
        check(out is not None and out["recording"], "%s: the program ran recorded" % name, rc=r.returncode,
              stderr=r.stderr)
        return out or {}, db

    lo, hi = N * 56 // 4096 // 3, N * 56 // 4096 * 3
    out, db = run("sampled", ["-s", "4K"])
    check(out.get("pythonmalloc") is None and out.get("wrapped") == 1,
          "-s 4K: PYTHONMALLOC left unset, pymalloc wrapped", out=out)
    check(lo <= out.get("headed", -1) <= hi, "-s 4K: %d..%d of the %d lists sampled" % (lo, hi, N), out=out)
    rep = subprocess.run([a.leakguard, "report", "-f", "json", db], stdout=subprocess.PIPE,
                         universal_newlines=True, timeout=120)
    d = json.loads(rep.stdout) if rep.returncode == 0 else {}
    sites = [s for s in d.get("largest_non_leaking", []) + d.get("suspects", [])
             if s["site"].get("file", "").endswith("main.py") and s["site"].get("line") == KEPT_LINE]
    est = sites[0]["live_bytes"] if sites else 0
    check(N * 56 * 0.6 <= est <= N * 56 * 1.6,
          "-s 4K: the site at main.py:%d estimates the lists' %d bytes" % (KEPT_LINE, N * 56), live_bytes=est,
          sites=[(s["site"].get("file"), s["site"].get("line"), s["live_bytes"])
                 for s in d.get("largest_non_leaking", [])[:8]])

    out, db = run("full", [])
    check(out.get("pythonmalloc") is None and out.get("wrapped") == 1,
          "full mode: PYTHONMALLOC left unset, pymalloc wrapped", out=out)
    # all but the few that CPython's list free list hands back (at most 80)
    check(out.get("headed", 0) >= N - 80, "full mode: every new list recorded", out=out)
    rep = subprocess.run([a.leakguard, "report", "-f", "json", db], stdout=subprocess.PIPE,
                         universal_newlines=True, timeout=120)
    d = json.loads(rep.stdout) if rep.returncode == 0 else {}
    sites = [s for s in d.get("largest_non_leaking", []) + d.get("suspects", [])
             if s["site"].get("file", "").endswith("main.py") and s["site"].get("line") == KEPT_LINE]
    got = (sites[0]["live_bytes"], sites[0]["live_blocks"]) if sites else (0, 0)
    # the lists, 56 bytes each, and the item array of KEPT (8 bytes a slot, overallocated
    # by at most an eighth); not pymalloc's arenas, which would count them twice
    check(got[1] >= N - 80 and (N - 80) * 56 <= got[0] <= N * 56 + N * 8 * 9 // 8 + 4096,
          "full mode: the site at main.py:%d holds the %d lists, 56 bytes each" % (KEPT_LINE, N), got=got)

    out, _ = run("user-malloc", ["-s", "4K"], pythonmalloc="malloc")
    check(out.get("pythonmalloc") == "malloc" and out.get("wrapped") == 0,
          "-s 4K, the user's PYTHONMALLOC=malloc: left as it is", out=out)
    check(lo <= out.get("headed", -1) <= hi, "-s 4K, PYTHONMALLOC=malloc: %d..%d lists sampled" % (lo, hi), out=out)

    out, _ = run("debug", ["-s", "4K"], pythonmalloc="pymalloc_debug")
    check(out.get("pythonmalloc") == "pymalloc_debug" and out.get("wrapped") == 0,
          "-s 4K, PYTHONMALLOC=pymalloc_debug: left as it is", out=out)
    return checks.finish(tmp)


if __name__ == "__main__":
    sys.exit(main())
