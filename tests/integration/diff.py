#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`leakguard diff OLD NEW` on real recordings of one program (late_leak): a healthy
run (its leak never switches on), a leaking run, and one leaking four times as fast.
The planted site (its LEAK-SITE line) is new from the healthy run to the leaking one
(exit 97 with --fail-on-new), fixed the other way (exit 0), worse at 4x, unchanged
against itself; bad input gets one line and status 2."""
import json
import os

import lgtest


def main():
    a = lgtest.parse_args()
    t = lgtest.Test("diff", a)
    site = t.site("late_leak.c")
    prog = t.bin("late_leak") if t.live else "late_leak"
    healthy = t.fx.run("healthy", lambda: t.lg_run([prog, "--seconds", "5", "--start", "100"], db=t.path("healthy.db"),
                                                   interval="0.1"))
    leaking = t.fx.run("leaking", lambda: t.lg_run([prog, "--seconds", "5", "--start", "1"], db=t.path("leaking.db"),
                                                   interval="0.1"))
    faster = t.fx.run("faster", lambda: t.lg_run([prog, "--seconds", "5", "--start", "1", "--size", str(4 * 28 * 1024)],
                                                 db=t.path("faster.db"), interval="0.1"))
    for p in (healthy, leaking, faster):
        t.check(p.returncode == 0, "recorded %s" % os.path.basename(p.db), exit=p.returncode, stderr=p.stderr[-2000:])

    def diff(old, new, *extra):
        p = t.run([a.leakguard, "diff", "--format", "json"] + list(extra) + [old, new])
        try:
            return p, json.loads(p.stdout)
        except ValueError:
            t.fatal("diff prints a JSON document", stdout=p.stdout[-2000:], stderr=p.stderr[-2000:])

    def planted(doc, kind):
        for s in doc["sites"]:
            if (s["kind"] == kind and site.func_matches(s["site"]["function"])
                    and site.file_matches(s["site"]["file"]) and s["site"]["line"] == site.line):
                return s
        return None

    p, doc = diff(healthy.db, leaking.db, "--fail-on-new")
    t.check(p.returncode == 97, "healthy -> leaking with --fail-on-new: exit 97", exit=p.returncode)
    t.check(doc["verdict"] == "regressed", "verdict regressed", doc=doc)
    s = planted(doc, "new")
    t.check(s is not None and s["old"]["state"] in ("absent", "stable"),
            "the planted line %s:%d is a new leak, not growing before" % (site.function, site.line), doc=doc)
    t.check(doc["counts"]["fixed"] == 0 and doc["counts"]["worse"] == 0, "nothing fixed or worse", counts=doc["counts"])

    p, doc = diff(leaking.db, healthy.db, "--fail-on-new")
    t.check(p.returncode == 0, "leaking -> healthy with --fail-on-new: exit 0", exit=p.returncode)
    t.check(doc["verdict"] == "improved" and planted(doc, "fixed") is not None,
            "the planted line is fixed, verdict improved", doc=doc)
    t.check(doc["counts"]["new"] == 0, "nothing new", counts=doc["counts"])

    p, doc = diff(leaking.db, faster.db)
    t.check(p.returncode == 0, "without --fail-on-new a regression exits 0", exit=p.returncode)
    s = planted(doc, "worse")
    t.check(s is not None and 3.0 <= s["ratio"] <= 5.0 and s["per_step"],
            "four times the bytes per step: the planted line is worse, ratio about 4", doc=doc)

    p, doc = diff(leaking.db, leaking.db, "--fail-on-new")
    t.check(p.returncode == 0 and doc["verdict"] == "same" and planted(doc, "unchanged") is not None
            and doc["counts"]["new"] == doc["counts"]["worse"] == doc["counts"]["fixed"] == 0,
            "a run against itself: the same, exit 0", exit=p.returncode, doc=doc)

    # the text form names the line and the verdict
    p = t.run([a.leakguard, "diff", healthy.db, leaking.db])
    t.check(p.returncode == 0 and "New leaks (growing in NEW, not in OLD):" in p.stdout
            and "%s (scenarios/late_leak.c:%d)" % (site.function, site.line) in p.stdout
            and "Verdict: regressed" in p.stdout, "text: the new leak's line and the verdict", stdout=p.stdout)

    # bad input: one line, status 2, nothing on stdout
    bad = lgtest.bad_databases(t, leaking.db)
    missing, foreign, truncated, future, notdb = (bad[k] for k in ("missing", "foreign", "truncated", "future", "text"))
    cases = [("a missing file", [missing, leaking.db]), ("a foreign database", [healthy.db, foreign]),
             ("a truncated database", [truncated, leaking.db]), ("a text file", [notdb, leaking.db]),
             ("a schema from the future", [leaking.db, future]),
             ("one database", [leaking.db]), ("three databases", [leaking.db, leaking.db, leaking.db]),
             ("a bad ratio", ["--worse-ratio", "1", leaking.db, leaking.db]),
             ("a bad format", ["--format", "xml", leaking.db, leaking.db])]
    for what, argv in cases:
        p = t.run([a.leakguard, "diff"] + argv)
        lgtest.one_line_error(t, p, what, expect_rc=2,
                              mention=["schema"] if what == "a schema from the future" else None)
        t.check(p.stdout == "", "%s: nothing on stdout" % what, stdout=p.stdout[:500])
    t.finish()


if __name__ == "__main__":
    main()
