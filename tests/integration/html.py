#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`leakguard report --format html`: the page of a leaking run (late_leak) and of a
healthy one, loaded in headless Chromium (Debian's chromium, installed by
scripts/deps.sh). The page is self-contained (no URL it would fetch); its script ran to
the end without an error; the DOM holds the leak's function and line, a memory curve
(an SVG polyline) with its time-to-OOM projection, flame graph nodes of the LEAK-SITE
function in both graphs, and the site table's first row (sorted by growth) is the
LEAK-SITE line. A screenshot is kept in BUILD/test-artifacts/report.png."""
import os
import re
import shutil

import lgtest


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def load(t, browser, page, extra=()):
    """The DOM after the page's scripts ran (--dump-dom), and Chromium's stderr."""
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--user-data-dir=" + t.path("chrome-profile"), "--enable-logging=stderr", "--v=0"] + list(extra)
    p = t.run(argv + ["--dump-dom", "file://" + page], timeout=120, env=dict(os.environ, HOME=t.tmp))
    return p.stdout, p.stderr


def main():
    a = lgtest.parse_args()
    t = lgtest.Test("html", a)
    browser = chromium()
    t.check(browser is not None, "chromium is installed (scripts/deps.sh installs it)")
    site = t.site("late_leak.c")
    rec = t.lg_run([t.bin("late_leak"), "--seconds", "5", "--start", "1"], db=t.path("leak.db"))
    ok = t.lg_run([t.bin("late_leak"), "--seconds", "3", "--start", "100"], db=t.path("ok.db"))
    page = t.path("leak.html")
    p = t.run([a.leakguard, "report", "--format", "html", "-o", page, rec.db])
    t.check(p.returncode == 0 and p.stderr == "", "report --format html -o FILE: exit 0", exit=p.returncode,
            stderr=p.stderr)
    html = open(page, encoding="utf-8").read()
    fetches = re.findall(r'(?:src|href)\s*=\s*["\']?(?!#|data:)([^"\' >]+)', html) + re.findall(r"url\((?!data:)", html)
    t.check(html.startswith("<!DOCTYPE html>") and not fetches and "http://" not in html.replace(
        "http://www.w3.org/2000/svg", ""), "self-contained: nothing fetched from anywhere", fetches=fetches[:10])
    p = t.run([a.leakguard, "report", "--format", "html", rec.db])
    t.check(p.returncode == 0 and p.stdout == html, "the same page on standard output")
    if not browser:
        t.finish()
    dom, err = load(t, browser, page)
    t.check('data-lg-ready="1"' in dom and "data-lg-error" not in dom,
            "the page's script ran to the end, without an error", body=re.findall(r"<body[^>]*>", dom),
            stderr=err[-2000:])
    console = [ln for ln in err.splitlines() if "CONSOLE" in ln]
    t.check(not console, "no console messages", console=console[:10])
    leaks = dom[dom.find('id="leaks"'):dom.find('id="processes"')]
    t.check(site.function in leaks and ("late_leak.c:%d" % site.line) in leaks,
            "the leak names %s at late_leak.c:%d" % (site.function, site.line), section=leaks[:2000])
    t.check(re.search(r'<polyline class="series" data-space="host" points="[0-9., ]{40,}"', leaks) is not None
            and 'class="oom"' in leaks and "OOM in" in leaks,
            "a memory curve with its time-to-OOM projection", section=leaks[:3000])
    for fid in ("flame-peak", "flame-growth"):
        sec = dom[dom.find('id="%s"' % fid):]
        sec = sec[:sec.find("</div></")] if "</div></" in sec else sec[:20000]
        t.check('data-fn="%s"' % site.function in sec, "the %s flame graph has a %s node" % (fid, site.function),
                section=sec[:1500])
    rows = re.findall(r"<tr[^>]*><td><code class=\"fn\">([^<]*)</code> <span class=\"loc\">([^<]*)</span>", dom)
    t.check(bool(rows) and site.func_matches(rows[0][0]) and rows[0][1].endswith("late_leak.c:%d" % site.line),
            "the site table's first row (by growth) is the LEAK-SITE line", rows=rows[:5])

    # a healthy run: no leak, the flame graph of growth says it is empty
    okpage = t.path("ok.html")
    p = t.run([a.leakguard, "report", "--format", "html", "-o", okpage, ok.db])
    t.check(p.returncode == 0, "the page of a healthy run", stderr=p.stderr)
    dom2, err2 = load(t, browser, okpage)
    t.check('data-lg-ready="1"' in dom2 and "data-lg-error" not in dom2 and "no leak found" in dom2
            and "0 leaks" in dom2 and "nothing to show" in dom2,
            "healthy: no leak, an empty growth graph, the script ran", body=re.findall(r"<body[^>]*>", dom2))

    # bad input: one line, status 2, no page left behind
    bad = lgtest.bad_databases(t, rec.db)
    for what, db, mention in (("a truncated database", bad["truncated"], None),
                              ("a schema from the future", bad["future"], "schema"),
                              ("an SQLite database that is not leakguard's", bad["foreign"], "not a leakguard"),
                              ("a missing database", bad["missing"], None)):
        out = t.path("bad.html")
        p = t.run([a.leakguard, "report", "--format", "html", "-o", out, db])
        lgtest.one_line_error(t, p, what, expect_rc=2, mention=[mention] if mention else None)
        t.check(not os.path.exists(out), "%s: no page left behind" % what)

    # the screenshot, kept for people to look at
    art = os.path.join(os.path.dirname(os.path.dirname(a.bin)), "test-artifacts")
    os.makedirs(art, exist_ok=True)
    shot = os.path.join(art, "report.png")
    if os.path.exists(shot):
        os.unlink(shot)
    t.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,2000",
           "--user-data-dir=" + t.path("chrome-profile"), "--screenshot=" + shot, "file://" + page],
          timeout=120, env=dict(os.environ, HOME=t.tmp))
    size = os.path.getsize(shot) if os.path.exists(shot) else 0
    with open(shot, "rb") if size else open(os.devnull, "rb") as f:
        magic = f.read(8)
    t.check(size > 20000 and magic == b"\x89PNG\r\n\x1a\n", "a screenshot is kept in %s" % shot, bytes=size)
    t.finish()


if __name__ == "__main__":
    main()
