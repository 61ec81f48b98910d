#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The fault suite (issue #31): leakguard under the faults of production. Each case runs
its target bare and recorded where there is one (same standard output, same status),
and checks that nothing recorded is lost and nothing that is not leakguard's is touched.

  second_run    a second `run -o same.db` while the first records, and after it: one
                line, exit 2, the first recording untouched (byte-identical report)
  stalled       the collector SIGSTOPped for 10 s under a target that forks every 20 ms:
                the target's longest pause <= 0.5 s, the leak still found, the gap said;
                with a small connection queue (LEAKGUARD_BACKLOG) the children past it
                run unrecorded and the report says how many
  disk_full     the database on a small full tmpfs: "disk full" in one line, the report
                readable, with how the process ended
  links         the default database name planted as symbolic links to a root-owned
                file, in a sticky and in a non-sticky world-writable directory: refused,
                the link's target unchanged
  guard_config  a guard config another user owns, writable by everyone: refused in one
                line naming it, its exec command never run
  metrics_idle  1000 idle connections to --metrics: a scrape still answers within 1 s

  python3 faults.py --leakguard BUILD/bin/leakguard --bin BUILD/tests/scenarios \\
      --forker BUILD/tests/faults/fault_forker --case stalled [--keep]
"""
import hashlib
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import lgtest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def extra(ap):
    ap.add_argument("--case", required=True)
    ap.add_argument("--forker", required=True)


def popen_lg(t, argv, env=None):
    print("  $ %s" % " ".join(argv), flush=True)
    return subprocess.Popen(argv, cwd=t.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def same_as_bare(t, bare, rec, what, counts=False):
    """The same status and standard output; counts: the numbers in it may differ (a
    program that serves what it can in its seconds: its load, not leakguard, sets them)."""
    t.check(rec.returncode == bare.returncode, "%s: the same exit status bare and recorded" % what,
            bare=bare.returncode, recorded=rec.returncode, stderr=rec.stderr[-1500:])
    norm = (lambda x: re.sub(r"\d+", "N", x)) if counts else (lambda x: x)
    t.check(norm(rec.stdout) == norm(bare.stdout), "%s: the same standard output bare and recorded%s" %
            (what, " (numbers aside)" if counts else ""), bare=bare.stdout[-800:], recorded=rec.stdout[-800:])


def text_report(t, db):
    p = t.run([t.args.leakguard, "report", db])
    t.check(p.returncode == 0, "the report of %s" % os.path.basename(db), stderr=p.stderr[-1500:])
    return p.stdout


def case_second_run(t, a):
    db, churn = t.path("same.db"), t.bin("churn_leak")
    bare = t.run([churn, "--seconds", "3"])
    first = popen_lg(t, [a.leakguard, "run", "-q", "-o", db, "--", churn, "--seconds", "3"])
    n1 = lgtest.wait_for_db(db, "SELECT count(*) >= 3 FROM snapshots", 60)
    t.check(n1 is not None, "the first run records")
    second = t.run([a.leakguard, "run", "-q", "-o", db, "--", churn, "--seconds", "1"])
    lgtest.one_line_error(t, second, "a second run on the same file while the first records", expect_rc=2,
                          mention=["in use"])
    t.check(second.stdout == "", "its target never ran", stdout=second.stdout[-500:])
    out, err = first.communicate(timeout=60)
    first.stdout_text = out
    same_as_bare(t, bare, subprocess.CompletedProcess(first.args, first.returncode, out, err), "the first run",
                 counts=True)
    r1 = text_report(t, db)
    t.check(r1.startswith("leakguard report: LEAK") and "exited with status 0" in r1,
            "the first recording is whole: its leak, its process's end", report=r1[:1500])
    again = t.run([a.leakguard, "run", "-q", "-o", db, "--", churn, "--seconds", "1"])
    lgtest.one_line_error(t, again, "a second run on a finished recording without --force", expect_rc=2,
                          mention=["exists", "--force"])
    t.check(text_report(t, db) == r1, "the first recording's report is byte-identical after both refusals")
    t.check(not os.path.exists(db + "-wal") or os.path.getsize(db + "-wal") == 0,
            "the database is whole in its own file (the WAL checkpointed at the end)")
    forced = t.run([a.leakguard, "run", "-q", "--force", "-o", db, "--", churn, "--seconds", "1"])
    t.check(forced.returncode == 0, "--force replaces it", exit=forced.returncode, stderr=forced.stderr[-800:])


def case_stalled(t, a):
    site = t.site(os.path.join(HERE, "forker.c"))
    gb, gr = t.path("gap-bare"), t.path("gap-rec")
    bare_p = popen_lg(t, [a.forker, "15", gb])  # beside the recorded run: same load, half the time
    db = t.path("s.db")
    # a queue of 64: past it the children cannot wait in the queue either (4096 by default)
    env = dict(os.environ, LEAKGUARD_BACKLOG="64")
    lg = popen_lg(t, [a.leakguard, "run", "-q", "-i", "0.1", "-o", db, "--", a.forker, "15", gr], env=env)
    # stopped once it has 1.5 s of the forker itself (its image is proc 1)
    t.check(lgtest.wait_for_db(db, "SELECT max(t_ns) - min(t_ns) >= 1500000000 FROM snapshots WHERE proc = 1", 60)
            is not None, "the collector records the forker")
    t0 = time.monotonic()
    os.kill(lg.pid, signal.SIGSTOP)
    print("  collector %d stopped" % lg.pid, flush=True)
    time.sleep(10)  # the fault itself: a collector stopped for 10 s
    os.kill(lg.pid, signal.SIGCONT)
    print("  collector continued after %.1f s" % (time.monotonic() - t0), flush=True)
    out, err = lg.communicate(timeout=90)
    bout, berr = bare_p.communicate(timeout=30)
    bare = subprocess.CompletedProcess(bare_p.args, bare_p.returncode, bout, berr)
    same_as_bare(t, bare, subprocess.CompletedProcess(lg.args, lg.returncode, out, err), "the forker")
    gap = int(open(gr).read()) if os.path.exists(gr) else None
    t.check(gap is not None and gap <= 500, "the target never waited for the stopped collector: its longest "
            "pause %s ms <= 500 ms (bare: %s ms)" % (gap, open(gb).read().strip()))
    rep = t.report_json(db)
    sus = rep["suspects"]
    t.check(rep["verdict"] == "leak" and bool(sus), "the leak is still found", verdict=rep["verdict"])
    if sus:
        t.check_site(sus[0], site, "rank 1 is the planted site " + site.describe())
    run = rep["runs"][0]
    g = run.get("snapshot_gap") or {}
    t.check(g and g["to_s"] - g["from_s"] >= 8, "runs[0].snapshot_gap spans the stop", gap=g)
    notes = " ".join(run.get("notes") or [])
    t.check("ran unrecorded" in notes, "the children that could not reach the collector in time are counted",
            notes=run.get("notes"))
    txt = text_report(t, db)
    t.check("no snapshots from" in txt and "ran unrecorded" in txt, "the text report names the gap and the "
            "unrecorded children", text=txt[:1500])


def case_disk_full(t, a):
    if os.geteuid() != 0:
        print("SKIP: mounting a small tmpfs needs root")
        sys.exit(SKIP)
    mnt = t.path("full")
    os.mkdir(mnt)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1536k", "tmpfs", mnt], capture_output=True, text=True)
    t.check(m.returncode == 0, "a 1.5 MiB tmpfs is mounted", stderr=m.stderr)
    if m.returncode != 0:
        t.finish()
    try:
        churn = t.bin("churn_leak")
        bare = t.run([churn, "--seconds", "3"])
        db = os.path.join(mnt, "run.db")
        rec = t.lg_run([churn, "--seconds", "3"], db=db)
        same_as_bare(t, bare, rec, "churn_leak on a full disk", counts=True)
        lines = [ln for ln in rec.stderr.splitlines() if ln.strip()]
        t.check(len(lines) == 1 and lines[0].startswith("leakguard: ") and "disk full" in lines[0]
                and db in lines[0] and "Input/output error" not in lines[0],
                "one line: the database, 'disk full'", stderr=rec.stderr)
        rep = t.report_json(db)
        run = (rep["runs"] or [{}])[0]
        t.check(run.get("end") == "exit" and run.get("exit_status") == 0,
                "the report says how the process ended (exit 0), not 'still running'", run=run)
        t.check(any("disk filled up" in n for n in run.get("notes") or []), "and that the disk filled up",
                notes=run.get("notes"))
        t.check(not os.path.exists(db + "-reserve"), "the reserve beside the database is gone")
        # Full before the start: refused before the program runs (the database itself
        # is made while the program starts; the reserve's room is checked before).
        with open(os.path.join(mnt, "filler"), "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        db2 = os.path.join(mnt, "full.db")
        p = t.run([a.leakguard, "run", "-q", "-o", db2, "--", churn, "--seconds", "1"])
        lgtest.one_line_error(t, p, "a disk full before the start", expect_rc=98, mention=["disk full"])
        t.check(db2 in p.stderr, "the error names the database", stderr=p.stderr)
        t.check(p.stdout == "", "the target never ran", stdout=p.stdout[-300:])
        left = sorted(n for n in os.listdir(mnt) if n.startswith("full.db"))
        t.check(left == [], "nothing of the refused database is left", left=left)
    finally:
        subprocess.run(["umount", "-l", mnt])


def case_links(t, a):
    churn = t.bin("churn_leak")
    victim = t.path("victim")
    with open(victim, "w") as f:
        f.write("root's file\n")
    before = hashlib.sha256(open(victim, "rb").read()).hexdigest()
    # The names of the pids the target may get, as another user would plant them: every
    # pid when there are at most 65 536 (Debian's default is 32 768), else the next
    # 30 000. A window of 4 000 after the last pid was not enough beside tests that fork
    # thousands of processes: the target's pid fell outside it, its database was written
    # and the test failed (a CI run of 2026-12-07).
    pid_max = int(open("/proc/sys/kernel/pid_max").read())
    last = int(open("/proc/sys/kernel/ns_last_pid").read()) if os.path.exists("/proc/sys/kernel/ns_last_pid") else 0
    pids = range(1, pid_max + 1) if pid_max <= 65536 else [1 + (last + k) % pid_max for k in range(30000)]
    for mode, mention in ((0o1777, "symbolic link"), (0o777, "not sticky")):
        d = t.path("dir-%o" % mode)
        os.mkdir(d)
        os.chmod(d, mode)
        for pid in pids:
            os.symlink(victim, os.path.join(d, "leakguard-churn_leak-%d.db" % pid))
        p = t.run([a.leakguard, "run", "-q", "--", churn, "--seconds", "1"], cwd=d)
        lgtest.one_line_error(t, p, "the default name in a %s world-writable directory" %
                              ("sticky" if mode & 0o1000 else "non-sticky"), expect_rc=2, mention=[mention])
        t.check(p.stdout == "", "the target never ran", stdout=p.stdout[-300:])
    after = hashlib.sha256(open(victim, "rb").read()).hexdigest()
    t.check(after == before, "the links' target is unchanged")
    for sub in ("report", "merge"):
        link = t.path("out-%s.db" % sub)
        os.symlink(victim, link)
        good = t.lg_run([churn, "--seconds", "1"], db=t.path("good-%s.db" % sub))
        argv = [a.leakguard, "report", "-o", link, good.db] if sub == "report" else \
            [a.leakguard, "merge", "-o", link, good.db]
        lgtest.one_line_error(t, t.run(argv), "%s -o a symbolic link" % sub, expect_rc=2)
    t.check(hashlib.sha256(open(victim, "rb").read()).hexdigest() == before, "still unchanged after report/merge -o")


def case_guard_config(t, a):
    d = t.path("cfg")
    os.mkdir(d)
    marker = t.path("marker")
    cfg = os.path.join(d, "guard.ini")
    with open(cfg, "w") as f:
        f.write("[levels]\nwarn = 20%%\n[warn]\nactions = exec\ncommand = touch %s\n" % marker)
    os.chmod(cfg, 0o666)
    if os.geteuid() == 0:
        os.chown(cfg, 65534, 65534)
    p = t.run([a.leakguard, "guard", "--config", cfg, "--system", "--duration", "1"])
    lgtest.one_line_error(t, p, "a world-writable guard config owned by another user", expect_rc=2,
                          mention=["refused"])
    t.check(cfg in p.stderr, "the line names the file", stderr=p.stderr)
    time.sleep(0.2)
    t.check(not os.path.exists(marker), "its exec command never ran")
    os.chmod(cfg, 0o644)
    os.chown(cfg, os.geteuid(), os.getegid())
    q = t.run([a.leakguard, "guard", "--config", cfg, "--system", "--dry-run", "--duration", "0.5"])
    t.check(q.returncode == 0, "the same config, owned and not writable by others, is read", exit=q.returncode,
            stderr=q.stderr[-800:])


def case_metrics_idle(t, a):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    port = lgtest.free_port()
    churn = t.bin("churn_leak")
    lg = popen_lg(t, [a.leakguard, "run", "-q", "-o", t.path("m.db"), "--metrics", "127.0.0.1:%d" % port, "--",
                      churn, "--seconds", "6"])
    idle = []

    def scrape():
        c = socket.create_connection(("127.0.0.1", port), timeout=1)
        c.settimeout(1)
        c.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            k = c.recv(65536)
            if not k:
                return data
            data += k
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:  # until the collector published its first figures
            try:
                if b"leakguard_rss_bytes " in scrape():
                    break
            except OSError:
                pass
            time.sleep(0.05)
        try:
            for _ in range(1000):
                s = socket.socket()
                idle.append(s)
                s.settimeout(5)
                s.connect(("127.0.0.1", port))
        except OSError as e:
            t.check(False, "1000 idle connections open (%d did, then: %s)" % (len(idle) - 1, e))
            return
        print("  1000 idle connections open", flush=True)
        t0 = time.monotonic()
        ok = False
        try:
            data = scrape()
            ok = data.startswith(b"HTTP/1.") and b"leakguard_rss_bytes " in data
            if not ok:
                print("  scrape answered: %r" % data[:300], flush=True)
        except OSError as e:
            print("  scrape failed: %s" % e, flush=True)
        took = time.monotonic() - t0
        t.check(ok and took <= 1.0, "a scrape answers within 1 s beside 1000 idle connections (%.2f s)" % took)
    finally:
        for s in idle:
            s.close()
        lg.communicate(timeout=60)


def main():
    a = lgtest.parse_args(extra)
    a.forker = os.path.abspath(a.forker)
    t = lgtest.Test("fault-%s" % a.case, a)
    globals()["case_" + a.case](t, a)
    t.finish()


if __name__ == "__main__":
    main()
