#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Imports sampled in a full recording (docs/python.md, "Imports sampled"), in one
CPython (--python 3.X, found at run time; absent: exit 77, saying which).

A module's body keeps 200 bytearrays of 100 000 bytes (TABLE, 20 MB) and 20 000 small
bytearrays (SMALL); after it, the program imports 20 more modules one at a time, and
right after each import keeps one bytearray (KEPT). Run twice:
  default (--import-sample 64K): few of TABLE's and SMALL's objects carry a header
    (sampled: a 56-byte object is picked with p ~ 0.001), every KEPT object does (the
    first allocation after an import is recorded again, exactly); TABLE's site still
    counts its 20 MB (each sampled block for its weight: within 30 %, ~8 standard
    deviations); the report says `import_sample_bytes` 65536 and prints the line;
  --import-sample 0: every object of TABLE, SMALL and KEPT carries its header, and the
    site counts TABLE's bytes exactly (200 x 100 001 bytes, plus the 200 objects).
And the holder walk at exit (docs/python.md, "At exit"), two short runs that end
normally: one that only imports (bigmod and the 20 others) writes no holders (its
largest Python sites are all start-up: nothing a report would show); one that also
keeps 50 bytearrays of 100 000 bytes outside any import (LATE) has them explained,
held by __main__.LATE.
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77

BIGMOD = """\
TABLE = [bytearray(100000) for _ in range(200)]  # TABLE-LINE
SMALL = [bytearray(8) for _ in range(20000)]
"""

MAIN = """\
import importlib, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import leakguard as lg
import bigmod
KEPT = []
for k in range(20):
    importlib.import_module("lazy_%d" % k)
    KEPT.append(bytearray(3000 + k))
def headed(objs):
    return sum(lg._site_of_object(o) is not None for o in objs)
print(json.dumps({"recording": lg.snapshot()["recording"], "table": headed(bigmod.TABLE),
                  "small": headed(bigmod.SMALL), "kept": headed(KEPT)}), flush=True)
os._exit(0)  # nothing freed at exit: the report's live bytes are the program's
"""

# exits normally: leakguard's atexit hook decides whether to walk the objects
ATEXIT = """\
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bigmod
for k in range(20):
    __import__("lazy_%d" % k)
if os.environ.get("LATE"):
    LATE = [bytearray(100000) for _ in range(50)]
"""


def main():
    sys.path.insert(0, HERE)
    import pyinterp
    a, python = pyinterp.check_script_args(__doc__)
    if not python:
        return SKIP
    tmp = tempfile.mkdtemp(prefix="lgpy-impsample-")
    with open(os.path.join(tmp, "bigmod.py"), "w") as f:
        f.write(BIGMOD)
    for k in range(20):
        with open(os.path.join(tmp, "lazy_%d.py" % k), "w") as f:
            f.write("X = [bytearray(100) for _ in range(50)]\n")
    script = os.path.join(tmp, "main.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(MAIN))
    atexit_script = os.path.join(tmp, "atexit_main.py")
    with open(atexit_script, "w") as f:
        f.write(ATEXIT)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(a.pydir), PYTHONDONTWRITEBYTECODE="1")
    checks = pyinterp.Checks()
    check = checks.check

    def run(extra):
        db = os.path.join(tmp, "run%d.db" % len(extra))
        cmd = [a.leakguard, "run", "-q", "-o", db] + extra + ["--", python, script]
        print("$ " + " ".join(cmd), flush=True)
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                           timeout=240)
        out = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and r.stdout.strip() else None
        check(out is not None and out["recording"], "the program ran recorded", rc=r.returncode, stderr=r.stderr)
        rep = subprocess.run([a.leakguard, "report", "-f", "json", db], stdout=subprocess.PIPE,
                             universal_newlines=True, timeout=120)
        text = subprocess.run([a.leakguard, "report", db], stdout=subprocess.PIPE, universal_newlines=True,
                              timeout=120).stdout
        d = json.loads(rep.stdout)
        table = [s for s in d["largest_non_leaking"] + d["suspects"]
                 if s["site"].get("file", "").endswith("bigmod.py") and s["site"].get("line") == 1]
        return out or {}, d, text, (table[0] if table else None)

    print("== default: imports sampled", flush=True)
    out, d, text, site = run([])
    check(out.get("kept") == 20, "every object allocated right after an import is recorded", kept=out.get("kept"))
    check(out.get("table", 200) < 50, "few of TABLE's objects are (sampled under the import)", table=out.get("table"))
    check(out.get("small", 20000) < 2000, "few of SMALL's 20 000 are", small=out.get("small"))
    check(d.get("import_sample_bytes") == 65536, "JSON import_sample_bytes 65536", got=d.get("import_sample_bytes"))
    check("Python imports sampled every 64.0 KiB" in text, "the text report says so", text=text[:1500])
    est = site["live_bytes"] if site else 0
    check(site is not None and abs(est - 200 * 100001) <= 0.3 * 200 * 100001,
          "TABLE's site estimates its 20 MB within 30 %", live_bytes=est, site=site and site["site"])

    print("== --import-sample 0: imports recorded in full", flush=True)
    out, d, text, site = run(["--import-sample", "0"])
    check(out.get("kept") == 20 and out.get("table") == 200 and out.get("small") == 20000,
          "every object carries its header", out=out)
    check(d.get("import_sample_bytes") == 0, "JSON import_sample_bytes 0", got=d.get("import_sample_bytes"))
    check("imports sampled" not in text, "the text report says nothing of it")
    exact = 200 * 100001
    live = site["live_bytes"] if site else 0
    check(site is not None and exact <= live <= exact + 200 * 128,
          "TABLE's site holds exactly 200 x 100 001 bytes and its 200 objects", live_bytes=live)
    print("== at exit: the holders of start-up sites are not looked for", flush=True)
    import sqlite3
    for late in (0, 1):
        db = os.path.join(tmp, "atexit%d.db" % late)
        cmd = [a.leakguard, "run", "-q", "-o", db, "--", python, atexit_script]
        print("$ %s%s" % ("LATE=1 " if late else "", " ".join(cmd)), flush=True)
        r = subprocess.run(cmd, env=dict(env, LATE="1" if late else ""), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=240)
        check(r.returncode == 0, "the program ran", rc=r.returncode, stderr=r.stderr)
        con = sqlite3.connect(db)
        chains = [c for (c,) in con.execute("SELECT chain FROM holders")]
        con.close()
        if late:
            check(any("__main__.LATE" in c for c in chains),
                  "kept outside any import: explained at exit, held by __main__.LATE", chains=chains[:20])
        else:
            check(chains == [], "imports only: no holder walk at exit", chains=chains[:20])
    return checks.finish(tmp)


if __name__ == "__main__":
    sys.exit(main())
