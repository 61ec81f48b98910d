#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`leakguard report --format html`: the page of a leaking run (late_leak) and of a
healthy one, loaded in headless Chromium (Debian's chromium, installed by
scripts/deps.sh). The page is self-contained (no URL it would fetch); its script ran to
the end without an error; the DOM holds the leak's function and line, a memory curve
(an SVG polyline) with its time-to-OOM projection, flame graph nodes of the LEAK-SITE
function in both graphs, and the site table's first row (sorted by growth) is the
LEAK-SITE line; opened as "#lg-test-sort=alloc", the page clicks the "allocated" column and
the table is in that order. The page of two ranks on two nodes, merged, lists both
processes with their host and rank and says where the leak is; the page of a Python
leak (pure_sessions.py) names its line and the objects that hold it. Bad databases are
refused. A screenshot is kept in BUILD/test-artifacts/report.png (scripts/test.sh says
where, with its size, at the end)."""
import os
import re
import shutil
import sqlite3

import lgtest

PY_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


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


def set_host(db, host):
    """As if the run had been recorded on the machine HOST (the test runs on one)."""
    con = sqlite3.connect(db)
    con.execute("UPDATE processes SET host = ?", (host,))
    con.execute("UPDATE labels SET value = ? WHERE key = 'host'", (host,))
    con.commit()
    con.close()


def section(dom, sid):
    """The DOM's text from the element with id SID to the end of its section."""
    s = dom[dom.find('id="%s"' % sid):]
    return s[:s.find("</section>")]


def allocated(dom):
    """The site table's rows as (function, location, bytes allocated), in the table's
    order; bytes as the page prints them ("58.1 MiB"), back in bytes."""
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    rows = re.findall(r'<tr[^>]*><td><code class="fn">([^<]*)</code> <span class="loc">([^<]*)</span></td>'
                      r'(?:<td>[^<]*</td>){3}<td>([0-9.]+) (B|[KMGT]iB)</td><td>\d+</td><td>[^<]*</td></tr>', section(dom, "sites"))
    return [(fn, loc, float(v) * units[u]) for fn, loc, v, u in rows]


def lifetimes(dom):
    """The site table's lifetime column: {function: text}."""
    rows = re.findall(r'<tr[^>]*><td><code class="fn">([^<]*)</code> <span class="loc">[^<]*</span></td>'
                      r'(?:<td>[^<]*</td>){5}<td>([^<]*)</td></tr>', section(dom, "sites"))
    return {fn.split(".")[0]: life for fn, life in rows}


def main():
    a = lgtest.parse_args()
    t = lgtest.Test("html", a)
    browser = chromium()
    t.check(browser is not None, "chromium is installed (scripts/deps.sh installs it)")
    site = t.site("late_leak.c")
    # two ranks of a job: rank 1 leaks, rank 0 does not
    job = dict(os.environ, WORLD_SIZE="2", LOCAL_RANK="0")
    rec = t.fx.run("leak", lambda: t.lg_run([t.bin("late_leak"), "--seconds", "5", "--start", "1"], db=t.path("leak.db"),
                                            env=dict(job, RANK="1")))
    ok = t.fx.run("ok", lambda: t.lg_run([t.bin("late_leak"), "--seconds", "3", "--start", "100"], db=t.path("ok.db"),
                                         env=dict(job, RANK="0")))
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

    # one click: the page opened with "#lg-test-sort=alloc" clicks the "allocated" column.
    # late_leak's decode() allocates the most: 4 KiB-256 KiB per request (about 60 KiB
    # on average) against 28 KiB thumbnails, one of each per request.
    with open(t.src("late_leak.c")) as f:
        decode_line = next(i + 1 for i, ln in enumerate(f) if "unsigned char *p = malloc(len);" in ln)
    dom3, err3 = load(t, browser, page + "#lg-test-sort=alloc")
    before, after = allocated(dom), allocated(dom3)
    t.check('data-lg-ready="1"' in dom3 and 'data-lg-test-sorted="alloc"' in dom3 and "data-lg-error" not in dom3,
            "#lg-test-sort=alloc: the page clicked the allocated column, without an error",
            body=re.findall(r"<body[^>]*>", dom3), stderr=err3[-2000:])
    t.check(re.search(r'<th data-k="alloc" class="sorted">', dom3) is not None and
            re.search(r'<th data-k="growth" class="[^"]*sorted', dom3) is None and
            re.search(r'<th data-k="growth" class="sorted">', dom) is not None,
            "the sorted column moved from growth/s to allocated", before=re.findall(r"<th[^>]*>", dom),
            after=re.findall(r"<th[^>]*>", dom3))
    t.check(len(after) > 2 and sorted(after) == sorted(before) and
            all(after[i][2] >= after[i + 1][2] for i in range(len(after) - 1)) and
            after[0][0] == "decode" and after[0][1].endswith("late_leak.c:%d" % decode_line) and before[0][0] != "decode",
            "after the click the same sites are in order of bytes allocated, decode (late_leak.c:%d) first"
            % decode_line,
            before=before[:6], after=after[:6])

    # the lifetime column (docs/lifetimes.md): decode's scratch buffers are young, the
    # thumbnails kept from --start on are old
    life = lifetimes(dom)
    t.check(life.get("decode", "").startswith("young") and life.get(site.function, "").startswith("old"),
            "the lifetime column: decode young, %s old" % site.function, lifetimes=life)

    # the processes and ranks of a job recorded on two nodes, merged (leakguard merge)
    nodes = []
    for db, host in ((ok.db, "node-a"), (rec.db, "node-b")):
        nodes.append(t.path("%s.db" % host))
        shutil.copyfile(db, nodes[-1])
        set_host(nodes[-1], host)
    merged = t.path("job.db")
    p = t.run([a.leakguard, "merge", "-o", merged] + nodes)
    t.check(p.returncode == 0, "merged the two nodes' runs", stderr=p.stderr)
    jobpage = t.path("job.html")
    p = t.run([a.leakguard, "report", "--format", "html", "-o", jobpage, merged])
    t.check(p.returncode == 0, "the page of the merged job", stderr=p.stderr)
    dom4, _ = load(t, browser, jobpage)
    procs = section(dom4, "processes")
    rows = re.findall(r'<tr( class="leaking")?><td>(\d+)</td><td>([^<]*)</td><td>([^<]*)</td>', procs)
    t.check(sorted((h, r, bool(c)) for c, _, h, r in rows) == [("node-a", "0", False), ("node-b", "1", True)],
            "processes: node-a rank 0, and node-b rank 1 marked leaking", rows=rows, section=procs[:2000])
    pid_b = next((pid for c, pid, h, r in rows if h == "node-b"), "?")
    t.check('data-lg-ready="1"' in dom4 and ("pid %s on node-b, rank 1" % pid_b) in section(dom4, "leaks"),
            "the leak says where it ran: pid %s on node-b, rank 1" % pid_b, section=section(dom4, "leaks")[:2000])

    # a Python program: the leak's Python line and the objects that hold it
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(a.leakguard), "..", "python"), LG_PY_SECONDS="3")
    script = t.fx.source(os.path.join(PY_DIR, "pure_sessions.py"))
    py = t.fx.run("py", lambda: t.lg_run(["/usr/bin/python3", script], db=t.path("py.db"), env=env))
    t.check(py.returncode == 0, "recorded pure_sessions.py", stderr=py.stderr[-2000:])
    pypage = t.path("py.html")
    p = t.run([a.leakguard, "report", "--format", "html", "-o", pypage, py.db])
    t.check(p.returncode == 0, "the page of a Python run", stderr=p.stderr)
    dom5, _ = load(t, browser, pypage)
    leaks = section(dom5, "leaks")
    t.check('data-lg-ready="1"' in dom5 and "Session.__init__" in leaks and "pure_sessions.py:12" in leaks,
            "the Python leak names Session.__init__ at pure_sessions.py:12", section=leaks[:2000])
    t.check(re.search(r'<p class="holder">held by __main__\.sessions \(dict\) \u2192 [^<]*\(Session\) \u2192 '
                      r'\.buf \u2192 bytearray\(\d+ bytes\)</p>', leaks) is not None,
            "its holder: __main__.sessions (dict) \u2192 [...] (Session) \u2192 .buf \u2192 bytearray",
            section=leaks[:2000])

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
