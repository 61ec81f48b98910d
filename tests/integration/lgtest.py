# SPDX-License-Identifier: MIT
"""Shared helpers for the leakguard integration tests (stdlib only).

Every test script takes:
  --leakguard PATH   the leakguard CLI
  --bin DIR          the directory holding the scenario binaries
  --src DIR          the scenario sources (default: ../scenarios next to this file)
  --interval S       snapshot interval passed to `leakguard run` (default 0.1; 0: none
                     given, leakguard's adaptive default)
  --keep             keep the temporary directory even when the test passes

A test calls `t = Test(description)`, runs things, records checks with
`t.check(cond, what, **values)` and ends with `t.finish()` (exit 0 or 1). Failed
checks print what was compared; `t.fatal()` stops at once.
"""

import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import fixture  # noqa: E402

SCEN_SRC_DEFAULT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "..", "scenarios"))

# Function-name suffixes that GCC gives to cloned/split functions.
_CLONE_SUFFIX = re.compile(r"(\.(constprop|isra|part|cold|lto_priv|localalias)(\.\d+)?)+$")


def free_port():
    """A TCP port on loopback that is free now (the caller binds it soon after)."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def parse_args(extra=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--src", default=SCEN_SRC_DEFAULT)
    ap.add_argument("--interval", default="0.1")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--fixture", help="replay (or, with LG_FIXTURE_RECORD=1, record) the fixture "
                    "tests/fixtures/NAME instead of a live run (tests/fixtures/fixture.py)")
    if extra:
        extra(ap)
    args = ap.parse_args()
    # commands run with the temporary directory as cwd: make paths absolute
    for k in ("leakguard", "bin", "src"):
        setattr(args, k, os.path.abspath(getattr(args, k)))
    return args


class TestFailed(Exception):
    pass


class Test:
    def __init__(self, name, args):
        self.name = name
        self.args = args
        self.failures = []
        self.checks = 0
        self.tmp = tempfile.mkdtemp(prefix="lgtest-%s-" % re.sub(r"\W+", "_", name))
        print("== %s (tmp %s)" % (name, self.tmp), flush=True)
        # live, or the fixture recorded (or to record) for this test
        self.fx = fixture.Fixture(getattr(args, "fixture", None), self.tmp, getattr(args, "leakguard", None))
        self.live = self.fx.live

    # ------------------------------------------------------------------ checks
    def check(self, cond, what, **values):
        self.checks += 1
        if cond:
            print("  ok   %s" % what, flush=True)
            return True
        msg = "  FAIL %s" % what
        for k, v in values.items():
            s = v if isinstance(v, str) else json.dumps(v, indent=None, default=str)
            if len(s) > 4000:
                s = s[:4000] + "...(truncated)"
            msg += "\n         %s = %s" % (k, s)
        print(msg, flush=True)
        self.failures.append(what)
        return False

    def fatal(self, what, **values):
        self.check(False, what, **values)
        self.finish()

    def finish(self):
        self.fx.finish(not self.failures)
        if self.failures:
            print("== %s: %d of %d checks FAILED (files kept in %s)" %
                  (self.name, len(self.failures), self.checks, self.tmp), flush=True)
            sys.exit(1)
        print("== %s: all %d checks passed" % (self.name, self.checks), flush=True)
        if not self.args.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        sys.exit(0)

    # ------------------------------------------------------------------ paths
    def bin(self, name):
        p = os.path.join(self.args.bin, name)
        if not os.path.exists(p):
            self.fatal("scenario binary exists", path=p)
        return p

    def src(self, name):
        return os.path.join(self.args.src, name)

    def path(self, name):
        return os.path.join(self.tmp, name)

    # ------------------------------------------------------------------ running
    def run(self, argv, timeout=100, check_signal=True, **kw):
        """Runs argv (cwd = tmp dir); returns CompletedProcess with text output."""
        print("  $ %s" % " ".join(argv), flush=True)
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, errors="replace", timeout=timeout,
                               cwd=kw.pop("cwd", self.tmp), **kw)
        except subprocess.TimeoutExpired as e:
            self.fatal("command finishes within %ss" % timeout, argv=argv,
                       stdout=(e.stdout or b"")[-3000:].decode(errors="replace")
                       if isinstance(e.stdout, bytes) else str(e.stdout)[-3000:],
                       stderr=(e.stderr or b"")[-3000:].decode(errors="replace")
                       if isinstance(e.stderr, bytes) else str(e.stderr)[-3000:])
        p.elapsed = time.monotonic() - t0
        print("    -> exit %d in %.1fs" % (p.returncode, p.elapsed), flush=True)
        if check_signal and p.returncode < 0:
            self.fatal("command is not killed by a signal (crash?)", argv=argv,
                       signal=-p.returncode, stderr=p.stderr[-3000:])
        return p

    def lg_run(self, target_argv, db=None, extra=(), timeout=100, interval=None, **kw):
        """`leakguard run --quiet --output DB --interval I EXTRA -- TARGET...`."""
        db = db or self.path("run.db")
        argv = [self.args.leakguard, "run", "--quiet", "--output", db]
        iv = str(interval or self.args.interval)
        if iv not in ("0", "0.0"):  # 0: leakguard's adaptive default
            argv += ["--interval", iv]
        argv += list(extra) + ["--"] + list(target_argv)
        p = self.run(argv, timeout=timeout, **kw)
        p.db = db
        return p

    def report_text(self, db, fmt="text"):
        """`leakguard report DB --format FMT`'s output, checked to exit 0 with nothing on
        standard error."""
        p = self.run([self.args.leakguard, "report", db, "--format", fmt])
        self.check(p.returncode == 0 and not p.stderr, "report --format %s exits 0" % fmt, exit=p.returncode,
                   stderr=p.stderr[-2000:])
        return p.stdout

    def report_json(self, db, extra=()):
        p = self.run([self.args.leakguard, "report", db, "--format", "json"] + list(extra))
        if p.returncode != 0:
            self.fatal("`leakguard report --format json` exits 0", db=db,
                       exit=p.returncode, stderr=p.stderr[-3000:])
        try:
            rep = json.loads(p.stdout)
        except ValueError as e:
            self.fatal("report output is valid JSON", error=str(e), stdout=p.stdout[:3000])
        self.check_schema(rep)
        return rep

    def check_formats(self, db, function=None):
        fixture.check_formats(self.args.leakguard, db, function, self.check)

    # ------------------------------------------------------------------ JSON contract
    def check_schema(self, rep):
        ok = isinstance(rep, dict) and rep.get("schema") == 1
        ok = ok and rep.get("verdict") in ("leak", "no-leak")
        ok = ok and isinstance(rep.get("runs"), list) and isinstance(rep.get("suspects"), list)
        if not self.check(ok, "report JSON has schema 1, verdict, runs[], suspects[]",
                          report=rep):
            self.finish()
        run_keys = {"pid", "command", "exit_status", "signal", "duration_s",
                    "peak_live_bytes", "final_live_bytes", "dropped_records"}
        sus_keys = {"rank", "pid", "space", "live_bytes", "live_blocks",
                    "growth_bytes_per_s", "growth_bytes_per_step", "time_to_oom_s",
                    "confidence", "pattern", "frames"}
        bad = [r for r in rep["runs"] if not run_keys <= set(r)]
        self.check(not bad, "every runs[] entry has the documented keys",
                   missing=[sorted(run_keys - set(r)) for r in bad])
        bad = [s for s in rep["suspects"] if not sus_keys <= set(s)]
        self.check(not bad, "every suspects[] entry has the documented keys",
                   missing=[sorted(sus_keys - set(s)) for s in bad])
        self.check((rep["verdict"] == "leak") == bool(rep["suspects"]),
                   "verdict is 'leak' exactly when suspects is non-empty",
                   verdict=rep["verdict"], n_suspects=len(rep["suspects"]))
        ranks = [s.get("rank") for s in rep["suspects"]]
        self.check(ranks == list(range(1, len(ranks) + 1)), "suspect ranks are 1..n in order",
                   ranks=ranks)

    # ------------------------------------------------------------------ ground truth
    def site(self, src_name, marker="/* LEAK-SITE */"):
        """(file, line, function) of the unique line ending in MARKER in a scenario source."""
        path = self.src(src_name)
        with open(path) as f:
            lines = f.read().split("\n")
        self.fx.source(path)
        hits = [i for i, l in enumerate(lines) if l.rstrip().endswith(marker)]
        if len(hits) != 1:
            self.fatal("exactly one %s line in %s" % (marker, src_name), found=len(hits))
        return Site(path, hits[0] + 1, enclosing_function(lines, hits[0]))

    def check_site(self, frame0_or_suspect, site, what, frames_for_msg=None, allow_std=False):
        """Checks that a suspect's allocation site is SITE: its `site` when the report
        moved it past library frames or a wrapper (`library_site`), else its frames[0].

        With allow_std, leading frames that belong to the C++ standard library
        (libstdc++ headers or module) are skipped before comparing: the site is
        then the first frame in user code."""
        sus = frame0_or_suspect
        frames = sus.get("frames") or []
        skipped = []
        if allow_std:
            while frames and is_std_frame(frames[0]):
                skipped.append(frames[0])
                frames = frames[1:]
        f0 = frames[0] if frames else {}
        # the site the report names: the program's own caller of a system library or of
        # its allocation wrapper, which stays frames[0] (docs/detection.md)
        if isinstance(sus.get("site"), dict) and sus.get("library_site"):
            f0 = sus["site"]
        ok = site.matches(f0)
        vals = dict(expected=site.describe(), got_frame0=f0,
                    frames=(frames_for_msg or sus.get("frames") or [])[:8])
        if skipped:
            vals["skipped_std_frames"] = len(skipped)
        return self.check(ok, what, **vals)


def is_std_frame(fr):
    f = fr.get("file") or ""
    m = fr.get("module") or ""
    fn = fr.get("function") or ""
    return ("/c++/" in f or "libstdc++" in m or fn.startswith("std::")
            or fn.startswith("__gnu_cxx::") or fn.startswith("operator new"))


class Site:
    def __init__(self, path, line, function):
        self.path = path
        self.line = line
        self.function = function

    def describe(self):
        return "%s() at %s:%d" % (self.function, os.path.basename(self.path), self.line)

    def file_matches(self, f):
        if not f:
            return False
        if os.path.isabs(f) and os.path.exists(f):
            return os.path.realpath(f) == os.path.realpath(self.path)
        return os.path.basename(f) == os.path.basename(self.path)

    def func_matches(self, fn):
        if not fn:
            return False
        fn = _CLONE_SUFFIX.sub("", fn)
        fn = strip_params(fn)
        want = self.function
        return fn == want or fn.endswith("::" + want) or (
            "::" in want and fn.endswith(want))

    def matches(self, fr):
        return (self.file_matches(fr.get("file")) and fr.get("line") == self.line
                and self.func_matches(fr.get("function")))


def strip_params(fn):
    """'ns::C::f(int, char const*) const' -> 'ns::C::f'; leaves C names alone."""
    depth = 0
    for i, ch in enumerate(fn):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            # keep "(anonymous namespace)::"
            if fn.startswith("(anonymous namespace)", i):
                continue
            return fn[:i]
    return fn


_CONTROL = {"if", "for", "while", "switch", "return", "do", "else", "sizeof"}
_DEF0 = re.compile(r"^(?=[A-Za-z_])[^=;]*?(?<![\w:~])([A-Za-z_][\w:~]*)\s*\(")
_MEMBER = re.compile(r"^  (?=[A-Za-z_])[^=;]*?(?<!\w)([A-Za-z_]\w*)\s*\([^;]*\{\s*$")
_CLASS = re.compile(r"^(?:class|struct)\s+(\w+)[^;]*\{\s*$")


def enclosing_function(lines, idx):
    """Name of the function whose body holds line IDX (0-based). Relies on the
    scenario sources' style: definitions start in column 0 (C functions, C++
    out-of-class definitions), or in column 2 inside a column-0 class/struct (C++
    members, reported as Class::member)."""
    member = None
    for i in range(idx, -1, -1):
        l = lines[i]
        m = _DEF0.match(l)
        if m and not l.rstrip().endswith(";") and m.group(1) not in _CONTROL:
            if member is None:
                return m.group(1)
            return member  # spurious member candidate: fall back below
        if member is None:
            m = _MEMBER.match(l)
            if m and m.group(1) not in _CONTROL:
                member = m.group(1)
                continue
        else:
            m = _CLASS.match(l)
            if m:
                return "%s::%s" % (m.group(1), member)
    return member or "?"


# ---------------------------------------------------------------------- DB helpers
def db_query(db, sql, args=()):
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def wait_for_db(db, sql, timeout, args=()):
    """Waits for an event the collector writes into DB (a snapshot, a flag, a holder):
    polls SQL (read-only) until its first value is true; that row, or None after
    TIMEOUT seconds (a ceiling, not a wait: tests wait for events, not for seconds)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(db):
            try:
                row = db_query(db, sql, args)
                if row and row[0] and row[0][0]:
                    return row[0]
            except sqlite3.Error:  # not created yet, or between two transactions
                pass
        time.sleep(0.05)
    return None


def last_snapshot(db, proc):
    rows = db_query(db, "SELECT live_bytes, live_blocks FROM snapshots WHERE proc=? "
                        "ORDER BY seq DESC LIMIT 1", (proc,))
    return rows[0] if rows else None


def parse_kv(text, prefix):
    """Parses 'prefix ... k=v k=v' from a line of program output into a dict."""
    for line in text.splitlines():
        if line.startswith(prefix) and "=" in line:
            return dict(re.findall(r"(\w+)=(-?\w+)", line))
    return None


def wait_for_file(path, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path):
            with open(path) as f:
                s = f.read().strip()
            if s:
                return s
        time.sleep(0.02)
    return None


def bad_databases(t, good):
    """Damaged copies of the database GOOD for bad-input tests, by kind: 'truncated' (a
    third of it), 'future' (schema 99), 'foreign' (an SQLite file that is not
    leakguard's), 'text' (not a database), 'missing'."""
    out = {"missing": t.path("missing.db")}
    out["truncated"] = t.path("truncated.db")
    shutil.copyfile(good, out["truncated"])
    with open(out["truncated"], "r+b") as f:
        f.truncate(os.path.getsize(out["truncated"]) // 3)
    out["future"] = t.path("future.db")
    shutil.copyfile(good, out["future"])
    con = sqlite3.connect(out["future"])
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    con.commit()
    con.close()
    out["foreign"] = t.path("foreign.db")
    con = sqlite3.connect(out["foreign"])
    con.execute("CREATE TABLE t(x)")
    con.commit()
    con.close()
    out["text"] = t.path("notes.txt")
    with open(out["text"], "w") as f:
        f.write("not a database\n" * 100)
    return out


def one_line_error(t, p, what, expect_rc=None, mention=None):
    """Checks a clean error: non-zero (or EXPECT_RC) exit, no signal, exactly one line
    on stderr starting 'leakguard: ', optionally mentioning one of MENTION."""
    err = p.stderr.strip("\n")
    lines = [l for l in err.split("\n") if l.strip()]
    if expect_rc is None:
        t.check(p.returncode not in (0,) and 0 < p.returncode < 128,
                "%s: non-zero exit, not a crash" % what, exit=p.returncode, stderr=err)
    else:
        t.check(p.returncode == expect_rc, "%s: exit status %d" % (what, expect_rc),
                exit=p.returncode, stderr=err)
    t.check(len(lines) == 1 and lines[0].startswith("leakguard: "),
            "%s: one-line error on stderr starting 'leakguard: '" % what, stderr=err)
    if mention:
        low = err.lower()
        t.check(any(m in low for m in mention),
                "%s: the error mentions %s" % (what, " or ".join(repr(m) for m in mention)),
                stderr=err)
