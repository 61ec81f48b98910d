#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fork: parent and forked child each leak a known amount from their own site.

Checks: both processes are recorded (runs[] has the parent's and the child's pid,
processes.ppid links them; the child, which renames itself, under its new title), each planted site is reported in the right process
with exactly the bytes and blocks the program says it leaked there, and neither
site is attributed to the other process.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402


def extra(ap):
    ap.add_argument("--seconds", default="4")
    ap.add_argument("--child-exit", default="exit", choices=("exit", "_exit"))


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("fork-%s" % args.child_exit, args)
    exe = t.bin("fork_leak")
    psite = t.site("fork_leak.c", "/* SITE:parent-leak */")
    csite = t.site("fork_leak.c", "/* SITE:child-leak */")
    title = "fork_leak: worker (retitled)"
    p = t.lg_run([exe, "--seconds", args.seconds, "--child-exit", args.child_exit, "--retitle", title])
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
        if mine:
            s = mine[0]
            t.check(s.get("live_bytes") == int(kv["leaked_bytes"])
                    and s.get("live_blocks") == int(kv["leaked_blocks"]),
                    "%s site: live bytes/blocks == what the %s leaked" % (who, who),
                    suspect=[s.get("live_bytes"), s.get("live_blocks")],
                    program_says=[int(kv["leaked_bytes"]), int(kv["leaked_blocks"])])
        if pid in runs:
            t.check((runs[pid].get("final_live_bytes") or 0) >= int(kv["leaked_bytes"]),
                    "%s's final live bytes include its leak" % who,
                    final=runs[pid].get("final_live_bytes"), leaked=kv["leaked_bytes"])
    t.finish()


if __name__ == "__main__":
    main()
