#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every place that names a site names it as the leak does (issue #34): the program's
own line or caller (the headline, findings/headline.c), with the frame it allocated
through ("via") when that is library code, a system library's or the program's own
allocation wrapper.

Judged on recorded fixtures (tests/fixtures), exact file:line in each format:
  - wrapped_server_hog (a server's own wrappers srv__alloc_mem / srv__dup_str): the
    leak's line and the largest sites at the peak in text and JSON, the leak and the
    site table of the HTML page (before: the table named srv__alloc_mem for every row);
  - python_model_attr (a tensor kept from torch's Linear.forward): the HTML site table
    names the script's own lines, torch's beside them (before: linear.py:114).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402
import fixture  # noqa: E402


def at(fr):
    """"function file:line" of a JSON frame (basename), or None."""
    if not fr:
        return None
    return "%s %s:%s" % (fr.get("function"), os.path.basename(fr.get("file") or ""), fr.get("line"))


def html_data(page):
    m = re.search(r'<script type="application/json" id="lg-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1)) if m else {}


def table_rows(d):
    """The HTML site table's rows as report.js builds them: site name -> (peak bytes,
    the library name of its stack that held the most at the peak)."""
    names, rows = d.get("names", []), {}
    for s in d.get("stacks", []):
        name = names[s[4]] if s[4] >= 0 else "??"
        fn, _, loc = name.partition("\t")
        key = "%s %s" % (fn, os.path.basename(loc))
        peak, lib, lib_peak = rows.get(key, (0, None, -1))
        peak += s[0]
        if len(s) > 10 and s[10] >= 0 and s[0] > lib_peak:
            lfn, _, lloc = names[s[10]].partition("\t")
            lib, lib_peak = "%s %s" % (lfn, os.path.basename(lloc)), s[0]
        rows[key] = (peak, lib, lib_peak)
    return {k: (v[0], v[1]) for k, v in rows.items()}


def main():
    args = lgtest.parse_args()
    t = lgtest.Test("site_names", args)

    # --- a C server with its own allocation wrappers
    db = fixture.replay_db("wrapped_server_hog", t.tmp)
    text = t.report_text(db, "text").splitlines()
    t.check("      allocated at retain_store (wrapped_server.c:106) via srv__alloc_mem (srv_mem.c:18): suspect #1"
            in text, "text: the leak names retain_store's line, via the wrapper",
            lines=[ln for ln in text if "allocated at" in ln])
    peak = [ln for ln in text if "packet_alloc" in ln]
    t.check(len(peak) == 1 and re.match(r"^ +21\.0 KiB  -  +packet_alloc \(wrapped_server\.c:90\) via srv__alloc_mem "
                                        r"\(srv_mem\.c:18\)  \(freed by the end\)$", peak[0]),
            "text: a site at the peak is named as the leak is (packet_alloc's line via srv__alloc_mem)", lines=peak)
    t.check(not [ln for ln in text if ln.startswith("    ") and " srv__alloc_mem (srv_mem.c:18)  " in ln
                 and " via " not in ln], "text: no site at the peak is named by the wrapper alone", text=text[-12:])
    rep = json.loads(t.report_text(db, "json"))
    sus = rep.get("suspects") or [{}]
    t.check(at(sus[0].get("site")) == "retain_store wrapped_server.c:106"
            and at(sus[0].get("library_site")) == "srv__alloc_mem srv_mem.c:18",
            "JSON: suspect #1 at retain_store:106, library_site srv__alloc_mem:18",
            site=sus[0].get("site"), library_site=sus[0].get("library_site"))
    pk = [(at(x.get("site")), at(x.get("library_site"))) for x in rep.get("largest_at_peak") or []]
    t.check(("packet_alloc wrapped_server.c:90", "srv__alloc_mem srv_mem.c:18") in pk
            and ("main wrapped_server.c:122", "srv__alloc_mem srv_mem.c:18") in pk
            and all(lib == "srv__alloc_mem srv_mem.c:18" for _, lib in pk),
            "JSON: largest_at_peak entries carry the caller as site and the wrapper as library_site",
            largest_at_peak=pk)
    page = t.report_text(db, "html")
    t.check('allocated at <code class="fn">retain_store</code> <span class="loc">wrapped_server.c:106</span> '
            '<span class="via">via</span> <code class="fn">srv__alloc_mem</code> <span class="loc">srv_mem.c:18</span>'
            in page, "HTML: the leak names retain_store's line via srv__alloc_mem")
    rows = table_rows(html_data(page))
    t.check(rows.get("retain_store wrapped_server.c:106") == (877566, "srv__alloc_mem srv_mem.c:18")
            and rows.get("packet_alloc wrapped_server.c:90") == (21550, "srv__alloc_mem srv_mem.c:18"),
            "HTML site table: retain_store:106 (857 KiB at the peak) and packet_alloc:90, each via srv__alloc_mem",
            rows=sorted(rows.items(), key=lambda kv: -kv[1][0])[:8])
    t.check(not [k for k in rows if k.startswith("srv__alloc_mem ") or k.startswith("srv__dup_str ")],
            "HTML site table: no row is named by a wrapper", rows=sorted(rows)[:20])

    # --- Python: a tensor kept from torch's Linear.forward
    db = fixture.replay_db("python_model_attr", t.tmp)
    rows = table_rows(html_data(t.report_text(db, "html")))
    t.check(rows.get("Net.forward leak_model_attr.py:17", (0, None))[1] == "Linear.forward linear.py:114"
            and rows.get("Net.__init__ leak_model_attr.py:13") == (267035, "Linear.__init__ linear.py:96"),
            "HTML site table: the script's own lines (17, 13), torch's lines beside them",
            rows={k: v for k, v in rows.items() if "leak_model_attr" in k or "linear.py" in k})
    t.check(not [k for k in rows if k.startswith("Linear.")],
            "HTML site table: no row is named by torch's Linear", rows=sorted(rows)[:20])
    t.finish()


if __name__ == "__main__":
    main()
