#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Lifetimes per site (issue #16, docs/lifetimes.md): the generations scenario's three
functions get the generation of their blocks, in the JSON report and in the liblgpool
site profile (`report --format pool-profile`), with mean lifetimes that match what the
program did (Little's law against the ground truth):
  load_weights     kept from the start                           old, ~ the whole run
  make_activation  freed within the step                         young, < 10 ms
  cache_request    a ring of --ring slots, one block a step      middle, ring / step rate
The distributions by age (100-ms ticks, and steps) bound what the program did.
--hog N runs N busy processes beside it: the classes must not depend on a quiet machine
(a slower loop makes the ring's blocks live longer, never shorter than 0.1 s).
--fixture NAME judges a recorded run (tests/fixtures/fixture.py).
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402

RING = 40
RATE = 200.0


def extra(ap):
    ap.add_argument("--hog", type=int, default=0)
    ap.add_argument("--seconds", default="5")


def main():
    a = lgtest.parse_args(extra)
    t = lgtest.Test("lifetimes", a)
    def live_run():
        code = "import time\nt=time.time()\nwhile time.time()-t<600: pass\n"
        hogs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(a.hog)]
        try:
            return t.lg_run([t.bin("generations"), "--seconds", a.seconds, "--ring", str(RING), "--rate", str(RATE)])
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    p = t.fx.run("run", live_run)
    t.check(p.returncode == 0, "the run exits 0", exit=p.returncode, stderr=p.stderr[-2000:])
    m = re.search(r"steps=(\d+) seconds=([0-9.]+)", p.stdout)
    if not m:
        t.fatal("the scenario prints steps= and seconds=", stdout=p.stdout[-1000:])
    steps, secs = int(m.group(1)), float(m.group(2))
    ring_life = RING * secs / steps  # each ring block lives RING steps
    print("  ground truth: %d steps in %.2f s, a ring block lives %.3f s" % (steps, secs, ring_life))

    rep = t.report_json(p.db)
    t.check(rep["verdict"] == "no-leak" or not rep["leaks"], "no leak", leaks=rep["leaks"][:2])
    life = {s["site"]["function"].split(".")[0]: s.get("lifetime")
            for s in rep["largest_non_leaking"] if s.get("site")}
    w, c = life.get("load_weights"), life.get("cache_request")
    t.check(w is not None and w["generation"] == "old" and w["kept"] >= 0.99 and 0.8 * secs <= w["mean_s"] <= 1.2 * secs,
            "JSON: load_weights is old, its blocks kept, living about the whole run (%.1f s)" % secs, lifetime=w)
    t.check(c is not None and c["generation"] == "middle" and 0.65 * ring_life <= c["mean_s"] <= 1.35 * ring_life
            and c["mean_steps"] is not None and 0.65 * RING <= c["mean_steps"] <= 1.35 * RING,
            "JSON: cache_request is middle, its blocks living %.3f s, %d steps (within 35 %%)" % (ring_life, RING),
            lifetime=c)

    # the distribution, from the blocks freed by age (100-ms ticks, log2 buckets): a
    # ring block's bucket bounds its lifetime from above; load_weights frees nothing
    d = (c or {}).get("distribution")
    t.check(w is not None and w.get("distribution") is None, "JSON: load_weights freed nothing: no distribution",
            lifetime=w)
    t.check(d is not None and 0.9 * (steps - RING) <= d["freed_blocks"] <= 1.1 * steps
            and isinstance(d["p50_lt_s"], float) and ring_life < d["p50_lt_s"] <= 4 * ring_life
            and d["p99_lt_s"] == "kept" and sum(b["blocks"] for b in d["freed"]) == d["freed_blocks"],
            "JSON: cache_request's freed blocks by age: p50 under %.1f-%.1f s (its blocks live %.3f s), p99 a kept one"
            % (ring_life, 4 * ring_life, ring_life), distribution=d)
    # in steps (step_lifetimes): exact from the birth step's residue, whatever the
    # machine's load: a ring block lives RING steps, in [32, 64) for RING = 40
    ds = (d or {}).get("steps")
    t.check(ds is not None and ds["p50_lt_steps"] == 64 and ds["p90_lt_steps"] == 64
            and all(b["lt_steps"] == 64 for b in ds["freed"]) and 0.9 * (steps - RING) <= ds["freed_blocks"] <= steps,
            "JSON: cache_request's freed blocks by age in steps: every one in [32, 64) (each lives %d steps)" % RING,
            steps=ds)
    q = t.run([a.leakguard, "report", "--format", "pool-profile", p.db])
    t.check(q.returncode == 0 and q.stderr == "", "report --format pool-profile: exit 0", exit=q.returncode,
            stderr=q.stderr[-1000:])
    rows = {}
    for ln in q.stdout.splitlines():
        body = ln.split("#", 1)[0].split()
        if body:
            rows[body[0]] = body[1]
    want = {"load_weights": "old", "make_activation": "young", "cache_request": "middle"}
    t.check(all(rows.get(k) == v for k, v in want.items()),
            "the profile: load_weights old, make_activation young, cache_request middle", rows=rows)
    t.check(all(g in ("young", "middle", "old") for g in rows.values()) and q.stdout.startswith("#"),
            "every line is '<function> <young|middle|old>' as liblgpool reads it", stdout=q.stdout[:2000])
    act = [ln for ln in q.stdout.splitlines() if ln.startswith("make_activation ")]
    mm = re.search(r"lifetime [<~]\s*([0-9.]+) (us|ms)", act[0]) if act else None
    t.check(mm is not None and float(mm.group(1)) * (1e-6 if mm.group(2) == "us" else 1e-3) < 0.01,
            "make_activation's blocks live under 10 ms", line=act)
    t.check(bool(act) and ", p90 < 100 ms (< 1 step)," in act[0],
            "make_activation: 90 % of its blocks freed within a tick, and within their step", line=act)
    t.finish()


if __name__ == "__main__":
    main()
