#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Grew then released (issue #34; docs/detection.md, rule 7): a site whose memory rose,
was held, and was given back by the end is no leak, and the report says so with its
figures instead of "freed by the end".

Judged on recorded fixtures (tests/fixtures), exact figures in each format:
  - keyspaces (a server's benchmark phases: a list pushed from 2.8 s to 4.0 s of an 8-s
    run, then popped empty) and keyspaces_hog (the same beside two CPU hogs): the
    list's node site is "grew then released" in the text, the JSON and the HTML page,
    and the verdict stays no leak;
  - cxx_queue (a queue that swells and drains every 1.5 s), sawtooth, churn_leak_hog
    (buffers allocated and freed per message, a burst caught by one snapshot): none of
    their sites is called so.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402
import fixture  # noqa: E402


def main():
    args = lgtest.parse_args()
    t = lgtest.Test("released", args)
    for name, peak, peak_b, small, small_b in (("keyspaces", "4.53 MiB", 4748800, "371 KiB", 379904),
                                               ("keyspaces_hog", "4.58 MiB", 4800000, "375 KiB", 384000)):
        db = fixture.replay_db(name, t.tmp)
        text = t.report_text(db, "text").splitlines()
        t.check(text[:1] == ["leakguard report: no leak found"], "%s: the verdict stays no leak" % name,
                head=text[:2])
        want = [r"^ +%s  released   list_push \(keyspaces\.c:105\)  \(grew then released: grew to %s by 4\.0 s, "
                r"released to 0 B by the end\)  \[" % (re.escape(peak), re.escape(peak)),
                r"^ +%s  released   list_push \(keyspaces\.c:104\)  \(grew then released: grew to %s by 4\.0 s, "
                r"released to 0 B by the end\)  \[" % (re.escape(small), re.escape(small))]
        rows = [ln for ln in text if "list_push" in ln]
        t.check(len(rows) == 2 and all(re.match(w, ln) for w, ln in zip(want, rows)),
                "%s text: list_push:105 and :104 grew then released (to %s and %s by 4.0 s, to 0 B)"
                % (name, peak, small), rows=rows)
        rep = json.loads(t.report_text(db, "json"))
        pk = {(x["site"]["function"], x["site"]["line"]): x for x in rep.get("largest_at_peak") or []}
        got = [pk.get(("list_push", 105), {}).get("released"), pk.get(("list_push", 104), {}).get("released")]
        t.check(rep.get("verdict") == "no-leak" and not rep.get("suspects")
                and got == [{"first_bytes": 0, "peak_bytes": peak_b, "peak_at_s": 4, "end_bytes": 0},
                            {"first_bytes": 0, "peak_bytes": small_b, "peak_at_s": 4, "end_bytes": 0}]
                and [k for k, x in pk.items() if x.get("released")] == [("list_push", 105), ("list_push", 104)],
                "%s JSON: no-leak; largest_at_peak's list_push:105 and :104 alone have `released`" % name,
                verdict=rep.get("verdict"), released=got)
        t.check(not [x for x in rep.get("largest_non_leaking") or [] if x.get("released")],
                "%s JSON: largest_non_leaking does not list what was released to nothing" % name)
        page = t.report_text(db, "html")
        t.check('<li class="released"><code class="fn">list_push</code> <span class="loc">keyspaces.c:105</span>: '
                'grew then released: grew to %s by 4.0 s, released to 0 B by the end; pid %d</li>'
                % (peak, rep["runs"][0]["pid"]) in page and '<h2>Grew then released</h2>' in page,
                "%s HTML: a section lists list_push:105, grew to %s by 4.0 s, released to 0 B" % (name, peak))
    for name in ("cxx_queue", "sawtooth", "churn_leak_hog"):
        db = fixture.replay_db(name, t.tmp)
        text = t.report_text(db, "text")
        t.check("grew then released" not in text and " released " not in text,
                "%s: no site grew then released (a cycle, a saw-tooth, a burst)" % name,
                rows=[ln for ln in text.splitlines() if "released" in ln])
    t.finish()


if __name__ == "__main__":
    main()
