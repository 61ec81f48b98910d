# SPDX-License-Identifier: MIT
"""A leaking script through a pyenv shim (issue #35 item 2): `leakguard run -- SHIM
script.py`, the shim being pyenv's `python3` (a bash script under `#!/usr/bin/env bash`
that runs pyenv's bash scripts, each with its readlink, sed and env, then execs the
interpreter: ~80 process images).

Checks, on the recording: the started command's first image (`env`) is recorded from its
start; every other image starts lazily, and each one that never began (the helpers)
stored no stack at all (the recorder captured nothing there: what makes a wrapper cost
next to nothing); no fork of a waiting image said hello before its exec (it says nothing
until it begins or exits: what it execs is the helper); the interpreter began to record,
its leak is found at the script's line and held by `__main__.keep` (the module, whose
set-up waits in a lazy image too, explained it at exit); the helpers are folded into one
line of the text report; the report (JSON main_run, the HTML title) is named after the
script. The time a shim costs is a
benchmark's (bench/wrappers.py, BENCHMARKS.md), not a test's.

  shim_check.py --leakguard PATH [--shim PATH]

Skips (77) where pyenv has no python3 shim.
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

from lazy_checks import Checks, held_by, leaks_at, main_run, suspects_brief

SCRIPT = """\
import time
keep = []
t0 = time.monotonic()
while time.monotonic() - t0 < 1.5:
    keep.append([0] * 2000)  # LEAK-SITE
    time.sleep(0.002)
print("shim leak done", len(keep))
"""


def find_shim(given):
    if given:
        return given if os.access(given, os.X_OK) else None
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    shim = os.path.join(root, "shims", "python3")
    return shim if os.access(shim, os.X_OK) else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--shim")
    a = ap.parse_args()
    shim = find_shim(a.shim)
    if not shim:
        print("SKIP: no pyenv python3 shim here (PYENV_ROOT or ~/.pyenv)")
        return 77
    tmp = tempfile.mkdtemp(prefix="lgtest-shim-")
    check = Checks()

    script = os.path.join(tmp, "shim_leak.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    line = SCRIPT.splitlines().index(next(x for x in SCRIPT.splitlines() if "LEAK-SITE" in x)) + 1
    db = os.path.join(tmp, "shim.db")
    p = subprocess.run([a.leakguard, "run", "-q", "-o", db, "--", shim, script], cwd=tmp,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    check(p.returncode == 0 and "shim leak done" in p.stdout, "run exits 0, the script ran to its end",
          rc=p.returncode, stdout=p.stdout[-500:], stderr=p.stderr[-2000:])
    if p.returncode != 0:
        return 1
    rep = json.loads(subprocess.run([a.leakguard, "report", "--format", "json", db], stdout=subprocess.PIPE,
                                    universal_newlines=True, check=True).stdout)
    runs = rep["runs"]
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    n = dict(con.execute("SELECT proc, count(*) FROM stacks GROUP BY proc").fetchall())
    procs = [r[0] for r in con.execute("SELECT proc FROM processes ORDER BY proc")]
    con.close()
    check(len(procs) == len(runs), "one run per process", procs=len(procs), runs=len(runs))
    for r, proc in zip(runs, procs):
        r["stacks_stored"] = n.get(proc, 0)
    first = runs[0]
    check("lazy" not in first and first.get("started_by") == "start",
          "the started command's first image is recorded from its start", first=first)
    waiting = [r for r in runs if r.get("lazy") == "waiting"]
    check(len(waiting) >= 20 and all(r.get("helper") for r in waiting),
          "at least 20 images never began to record, all folded as helpers",
          waiting=len(waiting), runs=[(r.get("command"), r.get("lazy"), r.get("helper")) for r in runs])
    stored = [(r.get("command"), r["stacks_stored"]) for r in waiting if r["stacks_stored"]]
    check(not stored, "no image that never began stored a stack", stored=stored)
    # a waiting bash's fork says nothing until it begins or exits: its exec'd helper is
    # the one image of that process
    forks = [(r.get("command"), r.get("pid")) for r in waiting
             if r.get("started_by") == "fork" and r.get("end") == "exec"]
    check(not forks, "no fork of a waiting image said hello before its exec", forks=forks[:10])
    main = main_run(rep)
    check("shim_leak.py" in str(main.get("command")) and main.get("lazy") == "began" and not main.get("helper"),
          "main_run is the interpreter's run, which began to record lazily", main=main)
    hits = leaks_at(rep, "shim_leak.py", line)
    check(len(hits) >= 1, "the leak is found at shim_leak.py:%d" % line,
          suspects=suspects_brief(rep))
    # the interpreter's leakguard module was set up late, as the recorder began (its
    # sitecustomize waits in a lazy image): the holders it names at exit prove it ran
    held = held_by(hits, "__main__.keep (list)")
    check(len(held) >= 1, "the leak is held by __main__.keep (the module, set up late, explained it)",
          holders=[s.get("holders") for s in hits])
    txt = subprocess.run([a.leakguard, "report", db], stdout=subprocess.PIPE, universal_newlines=True).stdout
    fold = [ln for ln in txt.splitlines() if "short-lived or idle helper processes (nothing growing):" in ln]
    procs_txt = [ln for ln in txt.splitlines() if ln.startswith("  process ")]
    check(len(fold) == 1 and len(procs_txt) <= 2 and any("shim_leak.py" in ln for ln in procs_txt),
          "the text report: the helpers in one line, the script's process line", text=txt[:2000])
    html = subprocess.run([a.leakguard, "report", "--format", "html", db], stdout=subprocess.PIPE,
                          universal_newlines=True).stdout
    title = html[html.find("<title>"):html.find("</title>")]
    check("shim_leak.py" in title, "the HTML page is named after the script", title=title)
    return check.finish(tmp)


if __name__ == "__main__":
    sys.exit(main())
