#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs one tests/python scenario under `leakguard run` and checks the JSON report.

  --expect leak     verdict "leak"; rank 1 is the line marked `# LEAK-SITE` in the
                    script (frames[0], file:line); its holders name --holder
  --expect no-leak  verdict "no-leak"

  --python 3.X      run the script with CPython 3.X, found at run time
                    (tests/python/pyinterp.py); absent: exit 77 (skipped), saying which.
                    Default: Debian's /usr/bin/python3.

--hog N: N busy processes share the CPUs while the script is recorded.

Findings (issue #10): --leaks N: the verdict leak comes with 1..N entries in `leaks`
(one cause; 2 for an autograd graph whose ops split), the first with rank 1 as its main
suspect; --leak-rank R: that leak is in the process of rank R of a distributed job;
--detected-within S: the leak was flagged while the program ran, at most S seconds
after its first step marker; --bounded: a no-leak run whose growing site the holder
explanation found held by a full bounded container (lru_cache, deque).

A leak report without any Python frame fails (the recorder reads the frames of every
CPython 3.9-3.13), and so does a `leakguard:` complaint about the Python version or the
module on stderr. Holders come from the report (suspects[].holders) or, until the
collector ingests them, from the holders-*.json files that `leakguard.explain()`
wrote into LEAKGUARD_DIR.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--pydir", required=True, help="build/python (the leakguard module)")
    ap.add_argument("--script", required=True)
    ap.add_argument("--args", default="")
    ap.add_argument("--expect", choices=("leak", "no-leak"), required=True)
    ap.add_argument("--holder", help="substring of the rank-1 suspect's holder chain")
    ap.add_argument("--kind", help="kind of that holder (tensor, autograd-graph, object)")
    ap.add_argument("--status", type=int, default=0, help="expected exit status")
    ap.add_argument("--child", action="store_true", help="the leak is in a forked child")
    ap.add_argument("--no-holders", action="store_true", help="no explain at exit (os._exit)")
    ap.add_argument("--sample", default="65536")
    ap.add_argument("--interval", default="0.2")
    ap.add_argument("--seconds", default="4")
    ap.add_argument("--marker", default="LEAK-SITE",
                    help="regex: rank 1 must be a line marked # MARKER")
    ap.add_argument("--holder-any", action="store_true",
                    help="the holder may be named for any suspect of the run, not only rank 1 "
                         "(small leaks spread over several sites, e.g. autograd graph nodes)")
    ap.add_argument("--run-arg", action="append", default=[],
                    help="extra option for `leakguard run` (repeatable)")
    ap.add_argument("--python", help="CPython minor version to run (3.X), found at run time")
    ap.add_argument("--leaks", type=int, default=0, help="at most N leak entries (at least 1)")
    ap.add_argument("--leak-rank", type=int, help="the leak is in the process of this rank")
    ap.add_argument("--detected-within", type=float,
                    help="flagged at most S seconds after the first step marker")
    ap.add_argument("--bounded", action="store_true",
                    help="no-leak: a site is reported held by a full bounded container")
    ap.add_argument("--live-explains", type=int, default=0,
                    help="at least N explanations of the leaking process stored before its "
                         "last step (asked by the collector when the site was flagged and "
                         "each time its memory doubled)")
    ap.add_argument("--all-statuses", action="store_true",
                    help="every recorded process has its exit status (workers reaped by "
                         "their own parent too), none is 'ended'")
    ap.add_argument("--native-first", action="store_true",
                    help="rank 1's frames begin with native allocation frames (torch's "
                         "allocator), then the Python line: stacks read innermost first")
    ap.add_argument("--no-holder", help="the leak names no holder, and its no_holder (why) matches this regex")
    ap.add_argument("--library-site", help="rank 1's innermost Python line is library code in this file "
                    "(library_site), the site the script's own line further out")
    ap.add_argument("--fix", help="the rank-1 leak's fix hint matches this regex, in the JSON and the text")
    ap.add_argument("--never-growing", metavar="MARKER",
                    help="no growing site (suspect or minor growth) at a line marked # MARKER")
    ap.add_argument("--chain-within", type=float, metavar="PCT",
                    help="the leak's holder says 'grad_fn chain N' with N within PCT %% of the run's steps")
    ap.add_argument("--holder-bytes-within", type=float, metavar="PCT",
                    help="the leak's holder keeps its live bytes within PCT %%")
    ap.add_argument("--kept-at", nargs=2, metavar=("MARKER", "VERB"),
                    help="the leak's holder is kept at the script's # MARKER line (holder.kept_at), and the "
                         "text says 'VERB at ... (script:line)'")
    ap.add_argument("--hog", type=int, default=0,
                    help="N busy processes share the CPUs while the script is recorded")
    ap.add_argument("--needs", action="append", default=[],
                    help="a module the script imports (torch): if the interpreter has none, fail saying so")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--fixture", help="judge the run recorded in tests/fixtures/NAME (with "
                    "LG_FIXTURE_RECORD=1: run live and record it there; tests/fixtures/fixture.py)")
    a = ap.parse_args()
    a.leakguard, a.pydir = os.path.abspath(a.leakguard), os.path.abspath(a.pydir)
    return a


class Checker:
    """check(cond, what, **vals): prints ok or FAIL (with VALS), records the failure in
    .fails, returns COND."""

    def __init__(self):
        self.fails = []

    def __call__(self, cond, what, **vals):
        print(("  ok   " if cond else "  FAIL ") + what, flush=True)
        if not cond:
            for k, v in vals.items():
                print("         %s = %s" % (k, json.dumps(v, default=str)[:3000]))
            self.fails.append(what)
        return cond


def main():
    a = parse_args()
    python = "/usr/bin/python3"
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
    import fixture
    import pyinterp
    script = os.path.join(HERE, a.script)
    tmp = tempfile.mkdtemp(prefix="lgpy-%s-" % os.path.splitext(a.script)[0])
    fx = fixture.Fixture(a.fixture, tmp, a.leakguard)
    fx.source(script)
    if fx.live:
        python = find_python(a, pyinterp)
        if not isinstance(python, str):
            return python
    lgdir = os.path.join(tmp, "lgdir")
    os.mkdir(lgdir)
    check = Checker()

    r = fx.run("run", lambda: run_live(a, python, script, tmp, lgdir))
    db = r.db
    sys.stdout.write(r.stdout[-2000:])
    sys.stderr.write(r.stderr[-3000:])
    check_run(a, fx, r, check)
    rep = subprocess.run([a.leakguard, "report", db, "--format", "json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=120)
    if not check(rep.returncode == 0, "leakguard report --format json", stderr=rep.stderr):
        return finish(check.fails, tmp, a.keep)
    doc = json.loads(rep.stdout)
    leaks = doc.get("leaks") or []
    check_verdict(a, doc, leaks, check)
    if a.expect == "leak" and leaks:
        check_leak(a, doc, leaks[0], db, check)
    if not fx.live:  # a recorded run: every format renders it, the planted line's function named
        fn = ((doc.get("suspects") or [{}])[0].get("site") or {}).get("function") if a.expect == "leak" else None
        fixture.check_formats(a.leakguard, db, fn, check)
    if a.expect == "leak" and doc.get("suspects"):
        check_rank1(a, doc, leaks, script, lgdir, db, check)
    fx.finish(not check.fails)
    return finish(check.fails, tmp, a.keep)


def check_run(a, fx, r, check):
    """The program's exit status (live runs), no complaint about its Python or the module."""
    if fx.live:  # the program's own exit status, through `leakguard run`
        check(r.returncode == a.status, "exit status %d" % a.status, got=r.returncode)
    complaints = [ln for ln in r.stderr.splitlines() if ln.startswith("leakguard:") and
                  ("not supported" in ln or "leakguard module" in ln or "not read" in ln)]
    check(not complaints, "no complaint about the Python version or module", stderr=complaints)


def check_verdict(a, doc, leaks, check):
    """The verdict, the processes' ends, the leak entries (none, or 1..--leaks)."""
    check(doc.get("verdict") == a.expect, "verdict %s" % a.expect, verdict=doc.get("verdict"),
          suspects=[s.get("site") for s in doc.get("suspects", [])][:5])
    if a.all_statuses:
        runs = doc.get("runs") or []
        check(len(runs) >= 2 and all(r.get("end") in ("exit", "signal", "exec") for r in runs),
              "every process's end is known (%d processes)" % len(runs),
              runs=[(r.get("pid"), r.get("end"), r.get("exit_status"), r.get("signal")) for r in runs])
    if a.expect == "no-leak":
        check(not leaks, "no leak entries", leaks=leaks[:3])
        if a.bounded:
            b = [x for x in doc.get("largest_non_leaking", []) if x.get("bounded")]
            check(bool(b), "a site is held by a full bounded container (not a leak)",
                  others=[(x.get("site"), x.get("pattern"), x.get("bounded"))
                          for x in doc.get("largest_non_leaking", [])][:6])
    if a.expect == "leak" and a.leaks:
        check(1 <= len(leaks) <= a.leaks and leaks[0].get("suspects", [0])[0] == 1,
              "1..%d leak entries, the first with suspect #1 as its main one" % a.leaks,
              leaks=[dict(x, holder=(x.get("holder") or {}).get("chain")) for x in leaks[:4]])


def check_leak(a, doc, leak, db, check):
    """The first leak entry, as far as the options ask: its rank, the explanations made
    while the program ran, why it names no holder, its fix, when it was flagged."""
    if a.leak_rank is not None:
        check_leak_rank(a, doc, leak, db, check)
    if a.live_explains:
        check_live_explains(a, leak, db, check)
    if a.no_holder:
        check_no_holder(a, leak, db, check)
    if a.fix:
        check_fix(a, leak, db, check)
    if a.kept_at:
        check_kept_at(a, leak, db, check)
    if a.chain_within is not None:
        check_chain(a, doc, leak, check)
    if a.holder_bytes_within is not None:
        h = leak.get("holder") or {}
        want = leak.get("live_bytes") or 0
        got = h.get("bytes")
        check(isinstance(got, (int, float)) and want > 0 and abs(got - want) <= want * a.holder_bytes_within / 100.0,
              "the holder keeps the leak's bytes within %g %% (issue #34 item 3)" % a.holder_bytes_within,
              holder_bytes=got, leak_live_bytes=want)
    if a.never_growing:
        check_never_growing(a, doc, check)
    if a.detected_within is not None:
        check_detected_within(a, leak, db, check)


def text_report(a, db):
    """`leakguard report DB` (the text format)."""
    return subprocess.run([a.leakguard, "report", db], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120).stdout


def check_leak_rank(a, doc, leak, db, check):
    """The leak is in the process of rank --leak-rank, and the text report says so."""
    check(leak.get("process_rank") == a.leak_rank, "the leak is in rank %d" % a.leak_rank,
          leak=leak, runs=[(r.get("pid"), r.get("rank"), r.get("leaking")) for r in doc["runs"]])
    txt = text_report(a, db)
    said = [ln for ln in txt.splitlines() if re.search(r"\brank %d( of \d+)? LEAKS\b" % a.leak_rank, ln)]
    others = [ln for ln in txt.splitlines() if re.search(r"\brank (?!%d\b)\d+( of \d+)? LEAKS" % a.leak_rank, ln)]
    check(len(said) == 1 and not others, "the text report says rank %d LEAKS (and no other rank)"
          % a.leak_rank, text=txt.splitlines()[:8])


def check_live_explains(a, leak, db, check):
    """--live-explains N: N+ explanations of the leaking process stored before its last step."""
    import sqlite3
    con = sqlite3.connect(db)
    rows = con.execute("SELECT h.explain, min(h.step), p.steps FROM holders h JOIN processes p"
                       " ON p.proc = h.proc WHERE p.pid = ? GROUP BY h.explain ORDER BY h.explain",
                       (leak.get("pid"),)).fetchall()
    con.close()
    live = [r for r in rows if r[2] and r[1] is not None and r[1] < r[2]]
    check(len(live) >= a.live_explains, "%d+ explanations while the program ran (flag, doubling)"
          % a.live_explains, explains=rows)


def check_no_holder(a, leak, db, check):
    """The leak names no holder, and says why (--no-holder), in the JSON and the text."""
    why = leak.get("no_holder") or ""
    check(leak.get("holder") is None and re.search(a.no_holder, why) is not None,
          "the leak names no holder, and says why (%s)" % a.no_holder, leak=leak)
    txt = text_report(a, db)
    check(any(ln.strip().startswith("no holder: ") and re.search(a.no_holder, ln) for ln in txt.splitlines()),
          "the text report says 'no holder:' and why", text=txt.splitlines()[:12])


def check_fix(a, leak, db, check):
    """The leak's one-line fix (src/findings/fix.c): `fix` in the JSON, `fix:` in the text."""
    fix = leak.get("fix") or ""
    check(re.search(a.fix, fix) is not None, "the leak's fix says /%s/" % a.fix, fix=fix)
    txt = text_report(a, db)
    check(any(ln.strip() == "fix: " + fix for ln in txt.splitlines()) and fix != "",
          "the text report's leak says 'fix:' with the same line", text=txt.splitlines()[:12])



def check_never_growing(a, doc, check):
    """No site at the script's # MARKER lines grows: neither a suspect nor minor growth
    (a temporary made and dropped every step, issue #34 item 5)."""
    lines = site_lines(os.path.join(HERE, a.script), a.never_growing)
    grown = [(k, s["site"].get("line")) for k in ("suspects", "minor_growth") for s in doc.get(k) or []
             if os.path.basename(s["site"].get("file") or "") == a.script and s["site"].get("line") in lines]
    check(not grown, "no growing site at %s:%s (# %s)" % (a.script, lines, a.never_growing), grown=grown)


def check_kept_at(a, leak, db, check):
    """Where the reference that keeps the leak is made (holder.kept_at, issue #34): the
    script's own line, the one marked # MARKER; the text's line under 'held by'."""
    marker, verb = a.kept_at
    lines = site_lines(os.path.join(HERE, a.script), marker)
    k = (leak.get("holder") or {}).get("kept_at") or {}
    check(os.path.basename(k.get("file") or "") == a.script and k.get("line") in lines,
          "the leak is kept at %s:%s (# %s)" % (a.script, lines, marker), kept_at=k)
    txt = text_report(a, db)
    want = "%s at " % verb
    check(any(ln.strip().startswith(want) and "(%s:%s)" % (a.script, k.get("line")) in ln for ln in txt.splitlines()),
          "the text report's leak says '%s... (%s:%s)'" % (want, a.script, k.get("line")),
          text=txt.splitlines()[:12])


def check_chain(a, doc, leak, check):
    """`total_loss += loss` adds one node a step to the graph total_loss keeps: the
    holder's 'grad_fn chain N' counts the steps (issue #34 item 3), within --chain-within %."""
    chain = (leak.get("holder") or {}).get("chain") or []
    m = re.search(r"grad_fn chain (\d+)", chain[-1] if chain else "")
    steps = [r.get("steps") for r in doc.get("runs", []) if r.get("pid") == leak.get("pid")]
    n, st = (int(m.group(1)) if m else None), (steps[0] if steps else None)
    check(n is not None and st and abs(n - st) <= st * a.chain_within / 100.0,
          "the holder's grad_fn chain is the step count within %g %%" % a.chain_within, chain=chain, steps=st)


def check_detected_within(a, leak, db, check):
    """The leak was flagged while the program ran, within --detected-within seconds of
    its first step marker."""
    import sqlite3
    con = sqlite3.connect(db)
    pid = leak.get("pid")
    row = con.execute("SELECT min(s.t_ns) - p.start_ns FROM snapshots s JOIN processes p"
                      " ON p.proc = s.proc WHERE p.pid = ? AND s.step > 0", (pid,)).fetchone()
    con.close()
    first = row[0] / 1e9 if row and row[0] is not None else None
    d = leak.get("detected_after_s")
    check(first is not None and isinstance(d, (int, float)) and d <= first + a.detected_within,
          "flagged while running, within %gs of the first step" % a.detected_within,
          detected_after_s=d, first_step_s=first)


def check_rank1(a, doc, leaks, script, lgdir, db, check):
    """The rank-1 suspect of a leak: its process, holders, site, frames; one suspect per
    site; the leak entry's holder; the text report."""
    s = doc["suspects"][0]
    if a.child:
        main_pid = doc["runs"][0]["pid"] if doc.get("runs") else None
        check(s.get("pid") != main_pid, "rank 1 is in the forked child", pid=s.get("pid"),
              main=main_pid)
    check_holders(a, doc, s, lgdir, check)
    f0 = check_site_frames(a, doc, s, script, check)
    # one suspect per allocation site
    keys = [json.dumps(x.get("site"), sort_keys=True) + str(x.get("pid")) + str(x.get("space"))
            for x in doc["suspects"]]
    check(len(keys) == len(set(keys)), "every suspect is its own allocation site",
          sites=[x.get("site") for x in doc["suspects"]][:8])
    # the leak entry itself names the holder (not only one of its suspects)
    if a.holder and not a.no_holders and leaks:
        lh = [x.get("holder") for x in (leaks if a.holder_any else leaks[:1]) if x.get("holder")]
        check(any(a.holder in " \u2192 ".join(h.get("chain", [])) for h in lh),
              "the leak entry's holder names %r" % a.holder, holders=lh[:3])
    check_text_site(a, db, script, f0, check)


def check_holders(a, doc, s, lgdir, check):
    """Holders of the rank-1 site (from the report, else the holders files) name --holder."""
    holders = s.get("holders")
    source = "report"
    if holders is None:
        source = "holders files"
        holders = []
        for f in sorted(glob.glob(os.path.join(lgdir, "holders-*.json"))):
            with open(f) as fh:
                hd = json.load(fh)
            if hd.get("pid") == s.get("pid"):
                holders += [h for h in hd.get("holders", []) if h.get("stack") == s.get("stack")]
    if a.no_holders or not a.holder:
        return
    if a.holder_any and source == "report":
        holders = [h for x in doc["suspects"] for h in (x.get("holders") or [])]
    hit = [h for h in holders if a.holder in " \u2192 ".join(h.get("chain", []))
           and (not a.kind or h.get("kind") == a.kind)]
    check(bool(hit), "holder of %s names %r%s (from %s)" %
          ("a suspect" if a.holder_any else "rank 1", a.holder,
           " as %s" % a.kind if a.kind else "", source), holders=holders[:6])
    for h in hit[:1]:
        print("         chain: " + " \u2192 ".join(h["chain"]))


def check_site_frames(a, doc, s, script, check):
    """Rank 1's site is the marked line (file:line), and its frames hold it; returns the site."""
    # the allocation site (the innermost Python line) of rank 1
    wants = site_lines(script, a.marker)
    f0 = s.get("site") or {}
    check(os.path.basename(f0.get("file") or "") == os.path.basename(script)
          and f0.get("line") in wants, "rank 1 is %s:%s" % (a.script, wants), site=f0,
          others=[x.get("site") for x in doc["suspects"][1:4]])
    # stacks read innermost first: the native frames under the line come before it;
    # library code (torch, the standard library) between them is passed over
    frames = s.get("frames") or []
    at = [i for i, f in enumerate(frames) if f.get("module") == "python"]
    lib = s.get("library_site")
    if a.library_site:
        check(lib is not None and os.path.basename(lib.get("file") or "") == a.library_site,
              "rank 1's library_site is the innermost line, in %s" % a.library_site, library_site=lib)
    first = lib if lib else {k: v for k, v in f0.items() if k != "source"}
    check(bool(at) and frames[at[0]] == first and
          {k: v for k, v in f0.items() if k != "source"} in [frames[i] for i in at],
          "frames hold %s as their first Python frame, and the site" % ("the library line" if lib else "the site"),
          frames=frames[:8])
    if a.native_first:
        check(bool(at) and at[0] > 0 and all(f.get("module") != "python" for f in frames[:at[0]]),
              "frames begin with the native allocation frames, then the Python line",
              frames=frames[:6])
    return f0


def check_text_site(a, db, script, f0, check):
    """The text report: the leak at the top, the site's line with its source text."""
    lines = text_report(a, db).splitlines()
    src_line = ""
    if f0.get("line"):
        with open(script) as fh:
            src_line = fh.read().splitlines()[f0["line"] - 1].split("#")[0].strip()
    check(len(lines) > 3 and lines[0] == "leakguard report: LEAK" and
          any(re.match(r"^\s+L1\s", ln) for ln in lines[:12]),
          "text report: LEAK, and leak L1 at the top", text=lines[:12])
    check(bool(src_line) and any(re.match(r"^\s+%d \| " % f0["line"], ln) and
                                 ln.split("| ", 1)[1].split("#")[0].strip() == src_line for ln in lines),
          "text report shows the source of %s:%s" % (a.script, f0.get("line")),
          want=src_line, text=lines[:40])


def find_python(a, pyinterp):
    """The interpreter to run (--python 3.X, or Debian's), with its leakguard module and
    what the script imports; otherwise the test's exit status (77: skipped)."""
    python = "/usr/bin/python3"
    if a.python:
        python, how = pyinterp.find(a.python)
        if not python:
            print("SKIP: " + how, flush=True)
            return SKIP
        print("CPython %s: %s" % (how, python), flush=True)
    # an interpreter that is there must have its module (Debian's python3 always), and
    # what the script imports (torch): their absence fails the test, saying so
    suffix = pyinterp.ext_suffix(python)
    mod = os.path.join(a.pydir, "leakguard" + (suffix or ".so"))
    if not suffix or not os.path.exists(mod):
        print("FAILED: no leakguard module for %s (%s): its headers were not found when the "
              "build was configured (for Debian's python3: python3-dev, scripts/deps.sh); "
              "reconfigure (src/python/interpreters.cmake)" % (python, mod), flush=True)
        return 1
    for m in a.needs:
        r = subprocess.run([python, "-c", "import " + m], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=300)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["?"])[-1]
            print("FAILED: %s cannot import %s, which %s needs (Debian: python3-%s, scripts/deps.sh): %s"
                  % (python, m, a.script, m, last), flush=True)
            return 1
    return python


def run_live(a, python, script, tmp, lgdir):
    """The script under `leakguard run` (beside --hog busy loops: a verdict must not
    depend on a quiet machine); the CompletedProcess, with .db."""
    db = os.path.join(tmp, "run.db")
    env = dict(os.environ)
    env["PYTHONPATH"] = a.pydir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # no PYTHONMALLOC: `leakguard run` sets it to malloc in full mode, and sampled mode
    # (--sample, 64 KiB by default here) keeps pymalloc, wrapped (preload.c)
    env.pop("PYTHONMALLOC", None)
    env["LEAKGUARD_DIR"] = lgdir  # `leakguard run` may set its own
    env["LG_PY_SECONDS"] = a.seconds
    cmd = [a.leakguard, "run", "-q", "-i", a.interval, "-o", db]
    if a.sample and a.sample != "0":
        cmd += ["-s", a.sample]
    cmd += a.run_arg
    cmd += ["--", python, script] + a.args.split()
    print("$ " + " ".join(cmd), flush=True)
    hog = "import time\nt=time.time()\nwhile time.time()-t<600: pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(a.hog)]
    try:
        r = subprocess.run(cmd, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=280)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    r.db = db
    return r


def site_lines(path, marker):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if re.search(r"#\s*(%s)\b" % marker, line):
                out.append(n)
    if not out:
        raise SystemExit("no # %s line in %s" % (marker, path))
    return out


def finish(fails, tmp, keep):
    if fails:
        print("FAILED: %s (kept %s)" % ("; ".join(fails), tmp))
        return 1
    if not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
