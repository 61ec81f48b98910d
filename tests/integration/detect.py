#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Detection test: runs one scenario under `leakguard run --fail-on-leak` and checks
the JSON report against the scenario's ground truth.

  --expect leak     verdict 'leak', exit 97, rank-1 suspect is the /* LEAK-SITE */
                    line of --source (function and file:line), in the target's pid,
                    host space, growing
  --expect no-leak  verdict 'no-leak', no suspects, exit 0

Other options: --scenario BIN (binary name in --bin), --source FILE (scenario source
holding the LEAK-SITE marker), --seconds N, --allow-std (C++: skip leading frames of
the standard library before comparing), --exact (the program prints
leaked_bytes=/leaked_blocks= for its LEAK-SITE: the suspect's live bytes and blocks
must equal them), --arg X (extra target argument, repeatable).

Findings (issue #10): a leak is exactly --leaks entries in `leaks` (default 1), whose
main suspect is rank 1; --detected-within S: the leak was flagged during the run, at
most S seconds after it began (the program's leak_start_s=, else 0); --minor: a
no-leak run must list minor growth; --under LIB: another allocator (jemalloc) is
preloaded after libleakguard.so; --hog N: N busy processes share the CPUs for the
whole run (a verdict must not depend on a quiet machine); --library-site FUNC: the
rank-1 suspect's site is the program's caller of FUNC (an allocation wrapper), which
stays its innermost frame and its library_site.

--fixture NAME: the run recorded in tests/fixtures/NAME is judged instead of a live one
(tests/fixtures/fixture.py): the same checks but the exit status of `run` and the
target's output passing through.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402

LEAK_PATTERNS = ("linear-leak", "accelerating-leak", "step-leak")


def extra(ap):
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--source")
    ap.add_argument("--expect", choices=("leak", "no-leak"), required=True)
    ap.add_argument("--seconds", default="5")
    ap.add_argument("--allow-std", action="store_true")
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--arg", action="append", default=[])
    ap.add_argument("--leaks", type=int, default=1)
    ap.add_argument("--detected-within", type=float)
    ap.add_argument("--minor", action="store_true")
    ap.add_argument("--under")
    ap.add_argument("--hog", type=int, default=0)
    ap.add_argument("--fix", help="the first leak's one-line fix matches this regex")
    ap.add_argument("--stdout-key", help="the prefix of the program's summary line (default: the scenario's name)")
    ap.add_argument("--library-site", help="the rank-1 suspect's library_site is this function (the "
                    "wrapper or system library the report passed over for the program's caller)")


def start_hogs(n):
    """N busy-looping processes (at the target's priority) for the length of the test."""
    code = "import time\nt=time.time()\nwhile time.time()-t<600: pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("detect-%s" % args.scenario, args)
    exe = t.bin(args.scenario) if t.live else args.scenario
    site = t.site(args.source) if args.expect == "leak" else None
    if site:
        print("  ground truth: %s" % site.describe())

    env = None
    if args.under and t.live:
        if not os.path.exists(args.under):
            t.fatal("allocator library installed (scripts/deps.sh installs libjemalloc2)", under=args.under)
        env = dict(os.environ, LD_PRELOAD=args.under)

    def live_run():
        hogs = start_hogs(args.hog)
        try:
            return t.lg_run([exe, "--seconds", args.seconds] + args.arg, extra=["--fail-on-leak"], env=env)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    p = t.fx.run("run", live_run)
    prog_out = lgtest.parse_kv(p.stdout, (args.stdout_key or args.scenario) + ":")
    if t.live:  # what only the run itself shows: its exit status, the output passing through
        want_rc = 97 if args.expect == "leak" else 0
        t.check(p.returncode == want_rc,
                "`run --fail-on-leak` exits %d (%s)" % (want_rc, args.expect),
                exit=p.returncode, stderr=p.stderr[-2000:], stdout=p.stdout[-2000:])
        t.check(os.path.exists(p.db), "database written to --output", db=p.db)
        if not os.path.exists(p.db):
            t.finish()
        t.check(prog_out is not None, "the target's own stdout passes through",
                stdout=p.stdout[-2000:])

    rep = t.report_json(p.db)
    runs, sus = rep["runs"], rep["suspects"]
    t.check(len(runs) == 1, "exactly one recorded process", runs=runs)
    if not runs:
        t.finish()
    run = runs[0]
    t.check(os.path.basename(exe) in str(run.get("command")),
            "runs[0].command names the target", command=run.get("command"))
    t.check(run.get("exit_status") == 0 and not run.get("signal"),
            "runs[0]: exit_status 0, no signal", run=run)
    t.check(run.get("dropped_records") == 0, "runs[0]: no dropped records", run=run)
    t.check(isinstance(run.get("duration_s"), (int, float))
            and float(args.seconds) * 0.8 <= run["duration_s"] <= float(args.seconds) + 30,
            "runs[0].duration_s is about the run length", duration_s=run.get("duration_s"),
            seconds=args.seconds)
    t.check(isinstance(run.get("peak_live_bytes"), int) and isinstance(run.get("final_live_bytes"), int)
            and run["peak_live_bytes"] >= run["final_live_bytes"] >= 0,
            "runs[0]: peak_live_bytes >= final_live_bytes >= 0", run=run)

    if not t.live:  # a recorded run: every format renders it, the planted site named
        t.check_formats(p.db, site.function.split("::")[-1] if site else None)
    if args.expect == "no-leak":
        t.check(rep["verdict"] == "no-leak" and not sus and not rep.get("leaks"),
                "verdict is no-leak, no suspects, no leaks", verdict=rep["verdict"],
                suspects=[x.get("site") for x in sus[:3]], leaks=rep.get("leaks"))
        if args.minor:
            t.check(bool(rep.get("minor_growth")), "the small growth is listed as minor growth",
                    minor=rep.get("minor_growth"))
        t.finish()

    leaks = rep.get("leaks") or []
    t.check(len(leaks) == args.leaks and leaks and leaks[0].get("suspects", [None])[0] == 1,
            "exactly %d leak(s), the first with suspect #1 as its main suspect" % args.leaks,
            leaks=[dict(x, holder=None) for x in leaks[:4]])
    if args.fix and leaks:
        t.check(re.search(args.fix, leaks[0].get("fix") or "") is not None,
                "the leak's fix says /%s/" % args.fix, fix=leaks[0].get("fix"))
    if args.detected_within is not None and leaks:
        began = float((prog_out or {}).get("leak_start_s", 0))
        d = leaks[0].get("detected_after_s")
        t.check(isinstance(d, (int, float)) and began <= d + 0.5 and d <= began + args.detected_within,
                "the leak was flagged during the run within %gs of its start (%gs)"
                % (args.detected_within, began), detected_after_s=d)

    t.check(rep["verdict"] == "leak", "verdict is leak", verdict=rep["verdict"])
    if not sus:
        t.finish()
    top = sus[0]
    t.check_site(top, site, "rank-1 suspect is the planted site " + site.describe(),
                 allow_std=args.allow_std)
    if args.library_site:
        lib = top.get("library_site") or {}
        # the innermost frame with a name: a frame without one (a stripped allocator's)
        # says nothing (docs/detection.md)
        named = [f for f in top.get("frames") or [] if f.get("file") or f.get("function") not in (None, "", "??")]
        t.check(lib.get("function") == args.library_site and named[:1] == [lib],
                "rank-1 library_site is %s, the innermost frame with a name" % args.library_site,
                library_site=lib, frames=(top.get("frames") or [])[:4])
    at = [s.get("rank") for s in sus if site.matches(s.get("site") or {})]
    print("  (info) %d suspects; planted site at rank(s) %s" % (len(sus), at or "none"))
    t.check(top.get("pid") == run.get("pid"), "rank-1 suspect is in the target's pid",
            suspect_pid=top.get("pid"), run_pid=run.get("pid"))
    t.check(top.get("space") == "host", "rank-1 suspect is in host space", space=top.get("space"))
    t.check(isinstance(top.get("growth_bytes_per_s"), (int, float)) and top["growth_bytes_per_s"] > 0,
            "rank-1 suspect grows (growth_bytes_per_s > 0)", suspect=dict(top, frames=None))
    t.check(top.get("pattern") in LEAK_PATTERNS, "rank-1 suspect's pattern is a leak pattern",
            pattern=top.get("pattern"))
    t.check(isinstance(top.get("confidence"), (int, float)) and 0 < top["confidence"] <= 1,
            "rank-1 confidence in (0, 1]", confidence=top.get("confidence"))
    fr = top.get("frames") or []
    t.check(all(isinstance(f, dict) and {"function", "file", "line", "module"} <= set(f) for f in fr)
            and len(fr) >= 2, "rank-1 frames have function/file/line/module (>= 2 frames)",
            frames=fr[:6])
    if args.exact and prog_out:
        want_b, want_n = int(prog_out.get("leaked_bytes", -1)), int(prog_out.get("leaked_blocks", -1))
        t.check(top.get("live_bytes") == want_b and top.get("live_blocks") == want_n,
                "rank-1 live bytes/blocks equal what the program leaked there",
                suspect_live=[top.get("live_bytes"), top.get("live_blocks")],
                program_says=[want_b, want_n])
    t.finish()


if __name__ == "__main__":
    main()
