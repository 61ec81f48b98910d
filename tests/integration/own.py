#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""--own (issue #34): a Python program whose leak is in a helper module installed under a
site-packages directory. The report names the program's own line that called the
helper, the helper's line below it as library_site; with --own naming the helper's
directory, the helper is the program's own code and its line is the site. `run --own`
keeps the paths in the database (meta `own`) for every later report; `report --own`
adds them at report time.

One recording (a few seconds, --hog N: beside N busy processes), three reports."""
import os
import shutil
import sqlite3
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402

HELPER = '''_kept = []


def remember(i):
    _kept.append(bytearray(2048 + i % 7))  # HELPER-SITE
'''

MAIN = '''import sys
import time

sys.path.insert(0, %r)
import helper_pkg.store as store  # noqa: E402

t = time.time()
i = 0
while time.time() - t < %s:
    store.remember(i)  # OWN-SITE
    i += 1
    time.sleep(0.001)
print("own_main: steps=%%d" %% i)
'''


def extra(ap):
    ap.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable)
    ap.add_argument("--seconds", default="3")
    ap.add_argument("--hog", type=int, default=0)


def line_of(text, marker):
    return [i + 1 for i, l in enumerate(text.split("\n")) if l.rstrip().endswith(marker)][0]


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("own", args)
    site = t.path("venv/lib/python3/site-packages")
    pkg = os.path.join(site, "helper_pkg")
    os.makedirs(pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    with open(os.path.join(pkg, "store.py"), "w") as f:
        f.write(HELPER)
    main_py = t.path("app/main.py")
    os.makedirs(os.path.dirname(main_py))
    text = MAIN % (site, args.seconds)
    with open(main_py, "w") as f:
        f.write(text)
    helper_at = (os.path.join(pkg, "store.py"), line_of(HELPER, "# HELPER-SITE"))
    own_at = (main_py, line_of(text, "# OWN-SITE"))

    hogs = [subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<600: pass\n"])
            for _ in range(args.hog)]
    try:
        p = t.lg_run([args.python, main_py], extra=["--own", pkg])
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    t.check(p.returncode == 0 and "own_main: steps=" in p.stdout, "the program ran under `leakguard run --own`",
            exit=p.returncode, stderr=p.stderr[-2000:])
    meta = lgtest.db_query(p.db, "SELECT value FROM meta WHERE key='own'")
    t.check(meta and meta[0][0] == os.path.realpath(pkg), "`run --own` keeps the path in meta `own`", meta=meta)

    def top_site(db, extra=()):
        rep = t.report_json(db, extra)
        sus = rep.get("suspects") or []
        if not t.check(rep["verdict"] == "leak" and sus, "the report finds the leak", verdict=rep["verdict"]):
            t.finish()
        s = sus[0]
        at = lambda fr: (os.path.realpath((fr or {}).get("file") or ""), (fr or {}).get("line"))
        return at(s.get("site")), at(s.get("library_site")) if s.get("library_site") else None, s

    real = lambda x: (os.path.realpath(x[0]), x[1])
    st, lib, s = top_site(p.db)
    t.check(st == real(helper_at) and lib is None,
            "with the run's --own, the site is the helper's line (no library_site)",
            site=s.get("site"), library_site=s.get("library_site"), want=helper_at)

    plain = t.path("plain.db")
    shutil.copy(p.db, plain)
    con = sqlite3.connect(plain)
    con.execute("DELETE FROM meta WHERE key='own'")
    con.commit()
    con.close()
    st, lib, s = top_site(plain)
    t.check(st == real(own_at) and lib == real(helper_at),
            "without --own, the site is the program's call of the helper, the helper's line its library_site",
            site=s.get("site"), library_site=s.get("library_site"), want=[own_at, helper_at])
    st, lib, s = top_site(plain, ["--own", pkg])
    t.check(st == real(helper_at) and lib is None, "`report --own` makes the helper the program's own code again",
            site=s.get("site"), library_site=s.get("library_site"), want=helper_at)
    t.finish()


if __name__ == "__main__":
    main()
