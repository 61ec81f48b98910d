#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fork: parent and forked child each leak a known amount from their own site.

Checks: both processes are recorded (runs[] has the parent's and the child's pid,
processes.ppid links them; the child, which renames itself, under its new title), each planted site is reported in the right process
with exactly the bytes and blocks the program says it leaked there, and neither
site is attributed to the other process.

--waiting: the program is exec'd by `bash -c` under `--lazy 1T,1`, so it forks while
it waits for its lazy start (docs/design.md "Lazy start"): the child says nothing until
it has lived 1 s itself, then says hello as a fork, with its fork as its start. Its run
is a fork of the program's image, it began 1 s or more after its start, and its site
holds whole blocks of the child's size (what it leaked before it began is not
attributed: at most all of it). A waiting image's fork that exits before it begins or
execs says hello as it exits: a bash subshell's `exit 7` (exit) and a Python child's
`os._exit(9)` (_exit) are fork runs with those statuses.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402


def extra(ap):
    ap.add_argument("--seconds", default="4")
    ap.add_argument("--child-exit", default="exit", choices=("exit", "_exit"))
    ap.add_argument("--waiting", action="store_true", help="forked while waiting for its lazy start")


def exits_seen(t):
    """Forks of waiting images that exit at once are seen, with their status."""
    for name, script, status in (
            ("bash subshell's exit", "exec bash -c '(exit 7); true'", 7),
            ("python child's os._exit", "exec " + sys.executable + " -c 'import os\npid = os.fork()\n"
             "os._exit(9) if pid == 0 else os.waitpid(pid, 0)'", 9)):
        p = t.lg_run(["bash", "-c", script], db=t.path("exit%d.db" % status))
        t.check(p.returncode == 0, "%s: run exits 0" % name, exit=p.returncode, stderr=p.stderr[-1000:])
        runs = t.report_json(p.db)["runs"]
        forks = [r for r in runs if r.get("started_by") == "fork"]
        t.check(len(forks) == 1 and forks[0].get("exit_status") == status and forks[0].get("lazy") == "waiting"
                and forks[0].get("end") == "exit",
                "%s: one fork run, never began, exit status %d" % (name, status),
                runs=[(r.get("command"), r.get("started_by"), r.get("lazy"), r.get("end"), r.get("exit_status"))
                      for r in runs])


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("fork-%s" % ("waiting" if args.waiting else args.child_exit), args)
    exe = t.bin("fork_leak")
    psite = t.site("fork_leak.c", "/* SITE:parent-leak */")
    csite = t.site("fork_leak.c", "/* SITE:child-leak */")
    title = "fork_leak: worker (retitled)"
    argv = [exe, "--seconds", args.seconds, "--child-exit", args.child_exit, "--retitle", title]
    if args.waiting:
        p = t.lg_run(["bash", "-c", "exec \"$@\"", "bash"] + argv, extra=["--lazy", "1T,1"])
    else:
        p = t.lg_run(argv)
    t.check(p.returncode == 0, "run exits 0", exit=p.returncode, stderr=p.stderr[-2000:])
    parent = lgtest.parse_kv(p.stdout, "parent ")
    child = lgtest.parse_kv(p.stdout, "child ")
    if not parent or not child:
        t.fatal("program printed parent and child summaries", stdout=p.stdout[-2000:])
    ppid, cpid = int(parent["pid"]), int(child["pid"])

    rep = t.report_json(p.db)
    runs = {r.get("pid"): r for r in rep["runs"]}
    t.check(set(runs) == {ppid, cpid}, "runs[] holds exactly the parent and the child",
            runs_pids=sorted(runs), parent=ppid, child=cpid)
    if cpid in runs:
        # the child renamed itself (postgres' backends do): the report names it so
        t.check(runs[cpid].get("command") == title, "child's command is its new title",
                command=runs[cpid].get("command"))
        t.check("--retitle" in str(runs[ppid].get("command") if ppid in runs else ""),
                "the parent's command stays its own", command=(runs.get(ppid) or {}).get("command"))
        # leakguard is not the child's parent: its exit status may be unknown (null).
        t.check(runs[cpid].get("exit_status") in (0, None) and not runs[cpid].get("signal"),
                "child's run: exit status 0 or unknown, no signal", run=runs[cpid])
    if ppid in runs:
        t.check(runs[ppid].get("exit_status") == 0, "parent's exit status 0", run=runs[ppid])
    try:
        rows = lgtest.db_query(p.db, "SELECT pid, ppid FROM processes")
        pp = dict((r[0], r[1]) for r in rows)
        t.check(pp.get(cpid) == ppid, "processes.ppid of the child is the parent's pid",
                processes=rows)
    except Exception as e:  # noqa: BLE001
        t.check(False, "database has a processes table with pid, ppid", error=str(e))

    for who, pid, site, kv, other in (("parent", ppid, psite, parent, cpid),
                                      ("child", cpid, csite, child, ppid)):
        hits = [s for s in rep["suspects"] if site.matches((s.get("frames") or [{}])[0])]
        mine = [s for s in hits if s.get("pid") == pid]
        t.check(len(mine) == 1, "%s site %s reported once in the %s's pid" % (who, site.describe(), who),
                suspects=[(s.get("rank"), s.get("pid"), s.get("live_bytes")) for s in hits],
                all_suspects=[(s.get("rank"), s.get("pid"), (s.get("frames") or [{}])[0])
                              for s in rep["suspects"]][:10])
        t.check(not [s for s in hits if s.get("pid") == other],
                "%s site is not attributed to the other process" % who,
                suspects=[(s.get("rank"), s.get("pid")) for s in hits])
        if mine and args.waiting:
            s, size = mine[0], int(kv["leaked_bytes"]) // int(kv["leaked_blocks"])
            t.check(0 < s.get("live_blocks", 0) <= int(kv["leaked_blocks"])
                    and s.get("live_bytes") == s.get("live_blocks") * size,
                    "%s site: whole blocks of %d bytes, at most the %s blocks leaked"
                    % (who, size, kv["leaked_blocks"]),
                    suspect=[s.get("live_bytes"), s.get("live_blocks")])
        elif mine:
            s = mine[0]
            t.check(s.get("live_bytes") == int(kv["leaked_bytes"])
                    and s.get("live_blocks") == int(kv["leaked_blocks"]),
                    "%s site: live bytes/blocks == what the %s leaked" % (who, who),
                    suspect=[s.get("live_bytes"), s.get("live_blocks")],
                    program_says=[int(kv["leaked_bytes"]), int(kv["leaked_blocks"])])
        if pid in runs:
            # waiting: what it leaked since its recording began (its site's bytes)
            held = mine[0].get("live_bytes", 0) if args.waiting and mine else int(kv["leaked_bytes"])
            t.check((runs[pid].get("final_live_bytes") or 0) >= held,
                    "%s's final live bytes include its leak" % who,
                    final=runs[pid].get("final_live_bytes"), leaked=kv["leaked_bytes"])
    if args.waiting:
        exits_seen(t)
    if args.waiting and cpid in runs and ppid in runs:
        c = runs[cpid]
        t.check(c.get("started_by") == "fork" and c.get("lazy") == "began" and c.get("lazy_began_s", 0) >= 1.0
                and c.get("duration_s", 0) > c.get("lazy_began_s", 0),
                "the child, forked while waiting, is a fork that began 1 s or more after its fork (its start)",
                child=c)
        rows = lgtest.db_query(p.db, "SELECT proc, pid, parent_proc, kind FROM processes ORDER BY proc")
        pimg = [r[0] for r in rows if r[1] == ppid and r[3] == "exec"]
        t.check([r[2:] for r in rows if r[1] == cpid] == [(pimg[0] if pimg else -1, "fork")],
                "one image of the child, a fork whose parent is the program's image (not bash's)",
                processes=rows)
    t.finish()


if __name__ == "__main__":
    main()
