#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`import torch` under leakguard (issue #12): the whole process recorded in full mode (its
imports sampled, the default; and recorded in full too, `--import-sample 0`) and sampled,
against the same interpreter bare, interleaved, median of REPS; the database's
size; and how long after the target's exit the report is ready (the collector's
processes.end_ns, CLOCK_MONOTONIC, against this script's clock when `leakguard run`
returns: the final snapshot, the last symbols and the whole report).

    bench/py_import.py BUILD [REPS]        (BENCHMARKS.md, "Python start-up")
    BEFORE=OLD_BUILD bench/py_import.py BUILD [REPS]
        adds full mode with another build (its own leakguard and module), interleaved
        in the same run: a change's before and after.
"""
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
lg = os.path.join(build, "bin", "leakguard")
py = "/usr/bin/python3"
code = "import torch"
tmp = tempfile.mkdtemp(prefix="lgimport-")
env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
modes = {
    "bare": [py, "-c", code],
    "bare, PYTHONMALLOC=malloc": ["env", "PYTHONMALLOC=malloc", py, "-c", code],
    "full": [lg, "run", "-q", "-o", os.path.join(tmp, "full.db"), "--", py, "-c", code],
    # imports recorded in full too (the default before imports were sampled)
    "full, --import-sample 0": [lg, "run", "-q", "--import-sample", "0", "-o", os.path.join(tmp, "full0.db"), "--",
                                py, "-c", code],
    "sampled 512K": [lg, "run", "-q", "-s", "512K", "-o", os.path.join(tmp, "sampled.db"), "--", py, "-c", code],
}
before = os.environ.get("BEFORE")
if before:
    before = os.path.abspath(before)
    modes["full, BEFORE build"] = ["env", "PYTHONPATH=" + os.path.join(before, "python"),
                                   os.path.join(before, "bin", "leakguard"), "run", "-q", "-o",
                                   os.path.join(tmp, "before.db"), "--", py, "-c", code]
wall = {m: [] for m in modes}
after = {m: [] for m in modes}
size = {m: [] for m in modes}
for _ in range(reps):
    for m, cmd in modes.items():
        t0 = time.monotonic()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        t1 = time.monotonic()
        wall[m].append(t1 - t0)
        if "-o" in cmd:
            db = cmd[cmd.index("-o") + 1]
            con = sqlite3.connect(db)
            end_ns = con.execute("SELECT max(end_ns) FROM processes").fetchone()[0]
            con.close()
            after[m].append(t1 - end_ns / 1e9)
            size[m].append(os.path.getsize(db) / 1e6)
base = statistics.median(wall["bare"])
print("| mode | wall (median of %d) | vs bare | database | report ready after the exit |" % reps)
print("|---|---|---|---|---|")
for m in modes:
    w = statistics.median(wall[m])
    db = "%.1f MB" % statistics.median(size[m]) if size[m] else ""
    ready = "%.2f s (max %.2f)" % (statistics.median(after[m]), max(after[m])) if after[m] else ""
    print("| %s | %.2f s | %.2f× | %s | %s |" % (m, w, w / base, db, ready))
subprocess.run(["rm", "-rf", tmp])
