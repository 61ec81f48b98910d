#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The HTML page of a recording with N stored stacks (issue #13: 100 000 stacks render
in at most 2 s), in headless Chromium: the time `leakguard report --format html` takes,
the page's size, the page script's own time from its start to the end of drawing
(data-lg-render-ms: parse the data, curves, both flame graphs, the site table), and
Chromium's whole load (--dump-dom) against a blank page loaded in the same run.

The database is a real recording (late_leak, for its schema and its processes) with N
synthetic stacks added: depth 8 to 40 over a tree of 6 000 locations, live bytes at
every snapshot, one in a hundred growing.

    bench/html_render.py BUILD [N] [REPS]        (BENCHMARKS.md, "HTML report")
"""
import os
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
lg = os.path.join(build, "bin", "leakguard")
browser = shutil.which("chromium") or sys.exit("chromium is not installed")
tmp = tempfile.mkdtemp(prefix="lghtml-")
db = os.path.join(tmp, "big.db")
subprocess.run([lg, "run", "-q", "-o", db, "--", os.path.join(build, "tests", "scenarios", "late_leak"),
                "--seconds", "3", "--start", "1"], check=True, stdout=subprocess.DEVNULL)
con = sqlite3.connect(db)
proc = con.execute("SELECT max(proc) FROM processes").fetchone()[0]
seqs = [s for (s,) in con.execute("SELECT seq FROM snapshots WHERE proc = ? ORDER BY seq", (proc,))]
rng = random.Random(7)
base = 1000000
locs = [(proc, base + i, 0x400000 + i * 16, "app", "fn_%d" % i, "/src/app/mod%d.c" % (i % 97), 10 + i % 500, 0)
        for i in range(6000)]
con.executemany("INSERT INTO locations VALUES (?,?,?,?,?,?,?,?)", locs)
stacks, samples = [], []
for k in range(n):
    depth = rng.randint(8, 40)
    path = [base + rng.randrange(0, 60)]  # a few roots, then branching
    for d in range(1, depth):
        path.append(base + (hash((path[-1], rng.randrange(0, 4))) % 6000))
    sid = 10 ** 6 + k
    stacks.append((proc, sid, "host", depth, "[" + ",".join(str(x) for x in reversed(path)) + "]"))
    grow = k % 100 == 0
    size = rng.randint(32, 65536)
    for i, s in enumerate(seqs):
        live = size * (i + 1) if grow else size
        samples.append((proc, sid, s, live, (i + 1) if grow else 1, live, (i + 1) if grow else 1, None))
con.executemany("INSERT INTO stacks VALUES (?,?,?,?,?)", stacks)
con.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?,?,?)", samples)
con.commit()
con.close()

page = os.path.join(tmp, "big.html")
blank = os.path.join(tmp, "blank.html")
with open(blank, "w") as f:
    f.write("<!DOCTYPE html><html><body data-lg-ready=\"1\">blank</body></html>\n")


def chrome(url):
    t0 = time.monotonic()
    p = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--user-data-dir=" + os.path.join(tmp, "profile"), "--dump-dom", "file://" + url],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=300)
    return time.monotonic() - t0, p.stdout


gen, load, base_load, script, nav = [], [], [], [], []
for _ in range(reps if reps > 0 else 0):
    t0 = time.monotonic()
    subprocess.run([lg, "report", "--format", "html", "-o", page, db], check=True)
    gen.append(time.monotonic() - t0)
    w, _ = chrome(blank)
    base_load.append(w)
    w, dom = chrome(page)
    load.append(w)
    m = re.search(r'data-lg-render-ms="(\d+)"', dom)
    if not m or 'data-lg-ready="1"' not in dom:
        sys.exit("the page did not finish drawing")
    script.append(int(m.group(1)) / 1000)
    nav.append(int(re.search(r'data-lg-load-ms="(\d+)"', dom).group(1)) / 1000)
    print("phases (ms):", re.search(r'data-lg-phases="([^"]*)"', dom).group(1), file=sys.stderr)
size = os.path.getsize(page) / 1e6
md = statistics.median
print("| stacks | page | `report --format html` | rendered (navigation start to drawn) | of which the page script |"
      " Chromium run, --dump-dom | blank page run |")
print("|---|---|---|---|---|---|---|")
print("| %d | %.1f MB | %.2f s | %.2f s | %.2f s | %.2f s | %.2f s |" % (
    n, size, md(gen), md(nav), md(script), md(load), md(base_load)))
if not os.environ.get("LG_BENCH_KEEP"):
    shutil.rmtree(tmp)
else:
    print("kept", tmp)
