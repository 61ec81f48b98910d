#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""CLI behaviour beyond detection:

  --case sample     --sample 64K still finds the planted leak of lru_leak at rank 1 and
                    estimates its live bytes within 25 %; a sampled control stays no-leak
  --case outputs    (churn_leak) text report names the site and the run's end; folded stacks are
                    "root;...;leaf BYTES" lines whose leaf frames include the leak site
                    and whose weights sum to the site's live bytes; report --fail-on-leak;
                    run --format json --report FILE writes the database's JSON report, byte
                    for byte, and nothing on standard output; an unknown format is a usage
                    error of one line
  --case collector  the collector is SIGKILLed mid-run: the target runs on unrecorded
                    and exits normally; the database written so far still reports
  --case live       on a terminal (pty) the live view shows the growing site in a
                    scroll region at the bottom, its lines cut to the width, the region
                    reset before the report; on a dumb terminal one plain status line
                    every 10 s, no escapes; with --quiet there is no view
  --case reader     a reader that opens the database the moment it appears (as a script
                    polling for flags does) does not end the run: 30 short runs, each
                    beside a thread that opens and queries the file in a loop. Before the
                    writer waited for readers, 7 of 30 ended at once, "database is
                    locked" (exit 98): all 30 passing by chance had p ~ 3e-4
  --case debuginfod DEBUGINFOD_URLS names a server on loopback: the program sees the
                    variable, the collector never connects to it (the fake server counts
                    its connections); with LEAKGUARD_DEBUGINFOD=1 it does
"""
import fcntl
import json
import os
import pty
import re
import select
import signal
import subprocess
import sqlite3
import struct
import sys
import termios
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402


def extra(ap):
    ap.add_argument("--case", required=True, choices=("sample", "outputs", "collector", "live", "live_python", "reader", "debuginfod"))


def case_sample(t, args):
    site = t.site("lru_leak.c")
    p = t.lg_run([t.bin("lru_leak"), "--seconds", "5"], extra=["--sample", "64K"])
    t.check(p.returncode == 0, "sampled run exits 0", exit=p.returncode, stderr=p.stderr[-2000:])
    rep = t.report_json(p.db)
    t.check(rep["runs"][0]["sample_bytes"] == 65536, "runs[].sample_bytes is 65536", runs=rep["runs"])
    sus = rep["suspects"]
    t.check(rep["verdict"] == "leak" and sus, "sampled run still finds the leak", suspects=sus)
    if sus:
        t.check_site(sus[0], site, "rank 1 is the planted site (sampled)")
        # exact run of the same scenario for the truth
        q = t.lg_run([t.bin("lru_leak"), "--seconds", "5"], db=t.path("full.db"))
        full = t.report_json(q.db)["suspects"]
        t.check(full, "full-mode run finds it too", suspects=full)
        if full:
            est, truth = sus[0]["live_bytes"], full[0]["live_bytes"]
            t.check(abs(est - truth) <= 0.25 * truth, "sampled live bytes within 25 % of full mode",
                    sampled=est, full=truth)
    c = t.lg_run([t.bin("sawtooth"), "--seconds", "5"], db=t.path("saw.db"), extra=["--sample", "64K"])
    crep = t.report_json(c.db)
    t.check(crep["verdict"] == "no-leak", "sampled control (sawtooth) is no-leak", suspects=crep["suspects"])


def case_outputs(t, args):
    # churn_leak keeps its leak until exit, so the folded stacks (live bytes at the end) hold it
    final = t.path("final.json")
    p = t.lg_run([t.bin("churn_leak"), "--seconds", "4"], extra=["--format", "json", "--report", final])
    rep = t.report_json(p.db)
    again = t.run([args.leakguard, "report", p.db, "--format", "json"])
    with open(final) as f:
        written = f.read()
    t.check(written and written == again.stdout, "run --format json --report FILE: the database's JSON report",
            written=written[:300], report=again.stdout[:300])
    t.check("leakguard report" not in p.stdout, "run --report: no report on standard output", stdout=p.stdout[-500:])
    bad = t.run([args.leakguard, "run", "--format", "yaml", "--", "true"])
    lines = bad.stderr.strip().splitlines()
    t.check(bad.returncode == 2 and len(lines) == 1 and "'yaml'" in lines[0] and "pool-profile" in lines[0],
            "run --format yaml: exit 2, one line naming it and the formats", exit=bad.returncode, stderr=bad.stderr)
    top = rep["suspects"][0] if rep["suspects"] else None
    t.check(top is not None, "a suspect to compare outputs against", report=rep)
    if top is None:
        t.finish()
    # the leak's first blocks were born in the first second: their age is about the run's
    # (the recorder's birth eras, summed over the threads' shards by the collector)
    dur = rep["runs"][0]["duration_s"]
    age = top.get("oldest_block_age_s")
    t.check(isinstance(age, (int, float)) and dur - 1.5 <= age <= dur + 0.5,
            "the oldest live block of the leak is about as old as the run", age=age, duration=dur)
    txt = t.run([args.leakguard, "report", p.db])
    t.check(txt.returncode == 0, "text report exits 0", exit=txt.returncode)
    first = txt.stdout.splitlines()[0] if txt.stdout else ""
    t.check(first == "leakguard report: LEAK", "text report starts with the verdict", first=first)
    t.check("exited with status 0" in txt.stdout, "text report says how the run ended", out=txt.stdout[:1500])
    want = "%s:%d" % (top["frames"][0]["file"], top["frames"][0]["line"])
    t.check(want in txt.stdout, "text report names the rank-1 site file:line", want=want, out=txt.stdout[:2000])
    fo = t.run([args.leakguard, "report", p.db, "--format", "folded"])
    lines = [l for l in fo.stdout.splitlines() if l.strip()]
    ok = fo.returncode == 0 and lines and all(l.rsplit(" ", 1)[1].isdigit() for l in lines)
    t.check(ok, "folded: every line is 'frames weight'", lines=lines[:10], exit=fo.returncode)
    fn = top["frames"][0]["function"]
    mine = [l for l in lines if (";" + fn + ";") in (";" + l.rsplit(" ", 1)[0] + ";")]
    total = sum(int(l.rsplit(" ", 1)[1]) for l in mine)
    t.check(mine and total >= top["live_bytes"], "folded stacks through %s weigh at least its live bytes" % fn,
            total=total, live=top["live_bytes"], lines=mine[:5])
    rc = t.run([args.leakguard, "report", p.db, "--fail-on-leak", "--format", "json"]).returncode
    t.check(rc == 97, "report --fail-on-leak exits 97 on a leak", exit=rc)
    top2 = t.run([args.leakguard, "report", p.db, "--format", "json", "--top", "1"])
    t.check(len(json.loads(top2.stdout)["suspects"]) == 1, "--top 1 keeps one suspect")


def case_collector(t, args):
    db = t.path("run.db")
    argv = [args.leakguard, "run", "--quiet", "--output", db, "--interval", "0.1", "--",
            t.bin("churn_leak"), "--seconds", "3"]
    print("  $ %s" % " ".join(argv), flush=True)
    # the target's output goes to a file: it must outlive the collector
    out = open(t.path("target.out"), "w")
    col = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, cwd=t.tmp)
    # killed once the collector has stored a few snapshots of the target
    t.check(lgtest.wait_for_db(db, "SELECT count(*) >= 5 FROM snapshots", 60) is not None,
            "the collector stores snapshots of the target")
    kids = subprocess.run(["pgrep", "-P", str(col.pid)], stdout=subprocess.PIPE, text=True).stdout.split()
    t.check(len(kids) == 1, "the target runs as the collector's child", children=kids)
    col.send_signal(signal.SIGKILL)
    col.wait()
    if kids:
        target = int(kids[0])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and os.path.exists("/proc/%d" % target):
            try:  # reparented: we cannot wait for it, poll /proc (a zombie reads 'Z')
                with open("/proc/%d/stat" % target) as f:
                    if f.read().split(") ")[1].split()[0] == "Z":
                        break
            except OSError:
                break
            time.sleep(0.1)
        out.flush()
        text = open(t.path("target.out")).read()
        t.check("leaked_bytes=" in text, "the target ran on to its normal end without the collector",
                output=text[-500:])
    rep = t.report_json(db)
    t.check(len(rep["runs"]) == 1 and rep["runs"][0]["end"] == "running",
            "the database written before the collector died still reports (run 'running')", runs=rep["runs"])
    # The run's private directory (socket, the Python side's files): in the user's own
    # XDG_RUNTIME_DIR (a tmpfs), never in another user's (sudo -E keeps the variable),
    # private, and gone at the end.
    bases = [("the user's own", os.getuid())] + ([("another user's", 1000)] if os.geteuid() == 0 else [])
    for who, uid in bases:
        base = t.path("xdg-%d" % uid)
        os.mkdir(base, 0o700)
        if uid != os.getuid():
            os.chown(base, uid, -1)
        p = t.run([args.leakguard, "run", "-q", "-o", t.path("xdg-%d.db" % uid), "--", "/bin/sh", "-c",
                   'echo "$LEAKGUARD_DIR"; stat -c %a "$LEAKGUARD_DIR"'], env=dict(os.environ, XDG_RUNTIME_DIR=base))
        lines = p.stdout.split()
        d = lines[0] if lines else ""
        inside = d.startswith(base + "/leakguard-")
        t.check(p.returncode == 0 and os.path.isabs(d) and inside == (uid == os.getuid()),
                "the run's directory is %s %s XDG_RUNTIME_DIR" % ("in" if uid == os.getuid() else "not in", who),
                dir=d, stderr=p.stderr[-300:])
        t.check(lines[1:] == ["700"], "the run's directory is private (0700)", got=lines[1:])
        t.check(d and not os.path.exists(d), "the run's directory is gone at the end", dir=d)


def pty_start(t, argv, term, rows=24, cols=100):
    """argv on a new pseudo-terminal of rows x cols with TERM=term: (pid, master fd)."""
    print("  $ (pty %dx%d, TERM=%s) %s" % (cols, rows, term, " ".join(argv)), flush=True)
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(t.tmp)
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.environ["TERM"] = term
        os.execv(argv[0], argv)
    return pid, fd


def pty_collect(runs, timeout=60):
    """Reads every run's terminal to its end: {fd: bytes}; then waits for each: {fd: status}."""
    bufs = {fd: b"" for _, fd in runs}
    open_fds = set(bufs)
    deadline = time.monotonic() + timeout
    while open_fds and time.monotonic() < deadline:
        r, _, _ = select.select(list(open_fds), [], [], 0.5)
        for fd in r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                open_fds.discard(fd)
            bufs[fd] += chunk
    status = {fd: os.waitpid(pid, 0)[1] for pid, fd in runs}
    return bufs, status


def case_live(t, args):
    def argv(db, seconds):
        return [args.leakguard, "run", "--interval", "0.2", "--output", t.path(db), "--",
                t.bin("lru_leak"), "--seconds", str(seconds)]
    # a terminal: the view in a scroll region at the bottom; a dumb one: a plain line
    # every 10 s (at 10 s here), no escape sequence at all
    term = pty_start(t, argv("live.db", 4), "xterm", 24, 100)
    dumb = pty_start(t, argv("dumb.db", 11), "dumb", 24, 80)
    bufs, status = pty_collect([term, dumb])
    text = bufs[term[1]].decode(errors="replace")
    t.check(os.WEXITSTATUS(status[term[1]]) == 0, "run on a terminal exits 0", status=status[term[1]])
    t.check("leakguard " in text and "GROWTH/s" in text, "the live view's header and table appear",
            out=text[-3000:])
    t.check(re.search(r"\x1b\[1;(1[2-9]|2[0-3])r", text),
            "the view keeps the last lines of the 24-row screen (a scroll region)", out=repr(text[-1500:]))
    # it erases only its own lines: each erase (ESC [2K) right after a move to a line of
    # the bottom half, no erase of the display (ESC [J: only after a resize)
    erases = [m.start() for m in re.finditer(r"\x1b\[2K", text)]
    stray = [repr(text[max(0, i - 40):i + 10]) for i in erases
             if not re.search(r"\x1b\[(1[3-9]|2[0-4]);1H$", text[max(0, i - 12):i])]
    t.check(erases and not stray and "\x1b[J" not in text,
            "the view erases only its own lines at the bottom, never the program's", stray=stray[:5])
    last = text.rfind("\x1b[r")
    t.check(last > text.rfind("GROWTH/s") and "leakguard report: " in text[last:],
            "the region is reset after the last frame, before the report", out=repr(text[-1500:]))
    t.check("lru_leak.c" in text and "linear-leak" in text, "the live table names the growing site",
            out=text[-3000:])
    # what the view draws: each line after its erase (ESC [2K), up to the next escape
    drawn = [seg.split("\x1b")[0] for seg in text.split("\x1b[2K")[1:]]
    wide = [ln for ln in drawn if len(ln) > 99 or "\n" in ln]
    t.check(drawn and not wide and any(ln.startswith("leakguard ") and len(ln) == 99 for ln in drawn),
            "every line of the view is cut to the 100 columns (the status line is)", wide=wide[:3],
            drawn=drawn[-6:])
    d = bufs[dumb[1]].decode(errors="replace")
    t.check(os.WEXITSTATUS(status[dumb[1]]) == 0, "run on a dumb terminal exits 0", status=status[dumb[1]])
    t.check("\x1b" not in d, "no escape sequence on a dumb terminal", out=repr(d[-1500:]))
    plain = [ln for ln in d.splitlines() if ln.startswith("leakguard ") and " pid " in ln]
    t.check(len(plain) == 1 and len(plain[0].rstrip("\r")) <= 79 and "live " in plain[0],
            "one plain status line at 10 s, cut to the 80 columns", lines=plain, out=d[-2000:])
    q = t.lg_run([t.bin("lru_leak"), "--seconds", "2"], db=t.path("q.db"))
    t.check("GROWTH/s" not in q.stderr and "leakguard " not in q.stderr, "no live view with --quiet",
            stderr=q.stderr[-1000:])


LIVE_OWN = """import copy, os, sys, time
keep = []
i = 0
while not os.path.exists(sys.argv[1]):
    for _ in range(200):
        keep.append(copy.deepcopy([i, [i] * 16, {"k": [i, i]}]))  # OWN
        i += 1
    time.sleep(0.02)
"""
ROW = re.compile(r"^ +[\d.]+ [KMGT]?i?B +[\d.]+ [KMGT]?i?B +[a-z-]+ +(.*\S)")


def case_live_python(t, args):
    """The live view names a Python site by the program's own line (issue #34): the kept
    lists and dicts are made inside copy.deepcopy (the standard library's copy.py), the
    row names the script's line that called it. The script runs until the test has seen
    the view draw a site, then stops."""
    script, stop = t.path("live_own.py"), t.path("stop")
    with open(script, "w") as f:
        f.write(LIVE_OWN)
    own = "live_own.py:%d" % (LIVE_OWN.splitlines().index(
        next(ln for ln in LIVE_OWN.splitlines() if "# OWN" in ln)) + 1)
    argv = [args.leakguard, "run", "--interval", "0.2", "--output", t.path("py.db"), "--",
            "/usr/bin/python3", script, stop]
    pid, fd = pty_start(t, argv, "xterm", 24, 160)
    buf, deadline = b"", time.monotonic() + 90
    while time.monotonic() < deadline and not os.path.exists(stop):
        r, _, _ = select.select([fd], [], [], 0.5)
        chunk = os.read(fd, 65536) if r else b""
        buf += chunk
        drawn = [seg.split("\x1b")[0] for seg in buf.decode(errors="replace").split("\x1b[2K")[1:]]
        if r and not chunk or any(own in m.group(1) for m in map(ROW.match, drawn) if m):
            open(stop, "w").close()
    if not os.path.exists(stop):
        open(stop, "w").close()
    bufs, status = pty_collect([(pid, fd)])
    text = (buf + bufs[fd]).decode(errors="replace")
    t.check(os.WEXITSTATUS(status[fd]) == 0, "run exits 0", status=status[fd])
    rows = [m.group(1) for m in (ROW.match(seg.split("\x1b")[0]) for seg in text.split("\x1b[2K")[1:]) if m]
    t.check(any(own in r for r in rows), "a row of the live view names the script's own line " + own,
            rows=rows[-6:], out=text[-2000:])
    t.check(not any("copy.py" in r for r in rows), "no row names the library's line (copy.py)", rows=rows[-6:])


def case_reader(t, args):
    failed = []
    for i in range(30):
        db = t.path("r%d.db" % i)
        stop = []

        def poll(db=db, stop=stop):
            while not stop:
                if os.path.exists(db):
                    try:
                        c = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=0.5)
                        c.execute("SELECT count(*) FROM sqlite_master").fetchall()
                        c.close()
                    except sqlite3.Error:
                        pass  # a file not yet a database: the reader's problem, not the run's
        th = threading.Thread(target=poll)
        th.start()
        try:
            r = subprocess.run([args.leakguard, "run", "-q", "-o", db, "--", "true"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        finally:
            stop.append(1)
            th.join()
        if r.returncode != 0:
            failed.append((i, r.returncode, r.stderr.strip()[-300:]))
    t.check(not failed, "30 runs beside a reader polling their database all exit 0", failed=failed)


def case_debuginfod(t, args):
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    srv.settimeout(0.2)
    url = "http://127.0.0.1:%d/" % srv.getsockname()[1]
    conns = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            conns.append(1)
            c.close()  # no answer: libdebuginfod gives up on this server
    th = threading.Thread(target=serve, daemon=True)
    th.start()
    import ctypes
    try:
        ctypes.CDLL("libdebuginfod.so.1")
        have_client = True
    except OSError:
        have_client = False
    # churn_leak: its stacks are symbolized, libc's and its own modules looked up
    for opt_in in (False, True):
        # a cache of its own: libdebuginfod remembers a failed query for 10 minutes
        env = dict(os.environ, DEBUGINFOD_URLS=url, DEBUGINFOD_TIMEOUT="2",
                   DEBUGINFOD_CACHE_PATH=t.path("dcache%d" % opt_in))
        env.pop("LEAKGUARD_DEBUGINFOD", None)
        if opt_in:
            env["LEAKGUARD_DEBUGINFOD"] = "1"
        db = t.path("dbg%d.db" % opt_in)
        before = len(conns)
        p = t.lg_run(["/bin/sh", "-c", 'echo "urls=$DEBUGINFOD_URLS"; exec %s --seconds 1' % t.bin("churn_leak")],
                     db=db, env=env)
        t.check(p.returncode == 0 and ("urls=" + url) in p.stdout, "the program keeps DEBUGINFOD_URLS",
                exit=p.returncode, stdout=p.stdout[-500:], stderr=p.stderr[-500:])
        n = len(conns) - before
        if opt_in and have_client:
            t.check(n > 0, "LEAKGUARD_DEBUGINFOD=1: the collector asks the debuginfod server", connections=n)
        elif opt_in:  # libdw asks through libdebuginfod.so.1 (package libdebuginfod1), optional
            print("  note: no libdebuginfod.so.1 on this machine: the opt-in cannot ask (connections %d)" % n)
        else:
            t.check(n == 0, "the collector never connects to the debuginfod server", connections=n)
    stop.set()
    th.join()


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("cli-%s" % args.case, args)
    cases = {"sample": case_sample, "outputs": case_outputs, "collector": case_collector, "live": case_live, "live_python": case_live_python,
             "reader": case_reader, "debuginfod": case_debuginfod}
    cases[args.case](t, args)
    t.finish()


if __name__ == "__main__":
    main()
