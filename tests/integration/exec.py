#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""exec: a launcher (exec_chain) leaks a known amount, then runs churn_leak.

  --mode exec       execv() in place: both images are recorded as their own runs[]
                    entries with the same pid; the launcher's leak is in its entry;
                    churn_leak's planted site is reported with that pid, exactly.
  --mode spawn      fork() + execv(): the child is its own run with its own pid.
  --mode no-follow  spawn under `run --no-follow`: only the launcher is recorded.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402

PRE_LEAK = 300 * 2048


def extra(ap):
    ap.add_argument("--mode", choices=("exec", "spawn", "no-follow"), required=True)


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("exec-%s" % args.mode, args)
    launcher = t.bin("exec_chain")
    target = t.bin("churn_leak")
    site = t.site("churn_leak.c")
    pre_site = t.site("exec_chain.c", "/* SITE:pre-exec */")
    mode = "exec" if args.mode == "exec" else "spawn"
    lg_extra = ["--no-follow"] if args.mode == "no-follow" else []
    p = t.lg_run([launcher, "--mode", mode, "--target", target, "--pre-seconds", "1.5",
                  "--seconds", "3"], extra=lg_extra)
    t.check(p.returncode == 0, "run exits 0 (the target's status)", exit=p.returncode,
            stderr=p.stderr[-2000:])
    la = lgtest.parse_kv(p.stdout, "launcher pid=")
    ch = lgtest.parse_kv(p.stdout, "churn_leak:")
    if not la or not ch:
        t.fatal("launcher and target printed their summaries", stdout=p.stdout[-2000:])
    lpid = int(la["pid"])
    rep = t.report_json(p.db)
    runs = rep["runs"]
    # exec_chain images: the launcher, and in spawn mode also the forked child
    # before its execv() (a run of its own, with the child's pid).
    lruns = [r for r in runs if "exec_chain" in str(r.get("command")) and r.get("pid") == lpid]
    fruns = [r for r in runs if "exec_chain" in str(r.get("command")) and r.get("pid") != lpid]
    truns = [r for r in runs if "churn_leak" in str(r.get("command"))
             and "exec_chain" not in str(r.get("command"))]
    t.check(len(lruns) == 1, "one run entry for the launcher, with its pid", runs=runs,
            launcher_pid=lpid)

    if args.mode == "no-follow":
        t.check(len(runs) == 1 and not truns and not fruns,
                "--no-follow: only the launcher is recorded", runs=runs)
        bad = [s for s in rep["suspects"] if site.matches((s.get("frames") or [{}])[0])]
        t.check(not bad, "--no-follow: nothing reported from the child", suspects=bad[:3])
        t.finish()

    t.check(len(truns) == 1, "one run entry for the exec'd target", runs=runs)
    if not truns:
        t.finish()
    tpid = truns[0].get("pid")
    want = 2 if args.mode == "exec" else 3
    t.check(len(runs) == want and (args.mode == "exec" or
                                   (len(fruns) == 1 and fruns[0].get("pid") == tpid)),
            "%d runs: launcher%s, target" % (want, "" if args.mode == "exec"
                                              else ", forked child before execv"),
            runs=runs)
    if args.mode == "exec":
        t.check(tpid == lpid, "exec'd image keeps the pid", target_pid=tpid, launcher_pid=lpid)
        fl = lruns[0].get("final_live_bytes") if lruns else None
        t.check(isinstance(fl, int) and fl >= PRE_LEAK,
                "launcher's final live bytes (at exec) include its %d leaked bytes" % PRE_LEAK,
                final_live_bytes=fl)
        pre = [s for s in rep["suspects"] if pre_site.matches((s.get("frames") or [{}])[0])]
        t.check(len(pre) == 1 and pre[0].get("live_bytes") == PRE_LEAK,
                "launcher's pre-exec site reported once with exactly %d bytes" % PRE_LEAK,
                found=[dict(s, frames=(s.get("frames") or [])[:2]) for s in pre])
    else:
        t.check(tpid != lpid, "spawned child has its own pid", target_pid=tpid, launcher_pid=lpid)
        # leakguard is not the child's parent: its exit status may be unknown (null)
        t.check(truns[0].get("exit_status") in (0, None) and not truns[0].get("signal"),
                "child: exit status 0 or unknown, no signal", run=truns[0])
    # The target's planted site: reported in the target's process, with exact bytes.
    hits = [s for s in rep["suspects"] if site.matches((s.get("frames") or [{}])[0])]
    t.check(len(hits) == 1 and hits[0].get("pid") == tpid,
            "churn_leak's planted site %s reported once, in the target's pid" % site.describe(),
            hits=[(s.get("rank"), s.get("pid")) for s in hits], target_pid=tpid,
            suspects=[(s.get("rank"), s.get("pid"), (s.get("frames") or [{}])[0])
                      for s in rep["suspects"]][:8])
    if hits:
        t.check(hits[0].get("live_bytes") == int(ch["leaked_bytes"])
                and hits[0].get("live_blocks") == int(ch["leaked_blocks"]),
                "target's planted site: live bytes/blocks == what it leaked",
                suspect=[hits[0].get("live_bytes"), hits[0].get("live_blocks")],
                program_says=[int(ch["leaked_bytes"]), int(ch["leaked_blocks"])])
        # Among the target's own sites it must rank first.
        tsus = [s for s in rep["suspects"] if s.get("pid") == tpid and
                any(site.file_matches(f.get("file")) for f in (s.get("frames") or [])[:1])]
        t.check(tsus and tsus[0] is hits[0], "planted site is the target's top suspect",
                target_suspects=[(s.get("rank"), (s.get("frames") or [{}])[0]) for s in tsus][:5])
    t.finish()


if __name__ == "__main__":
    main()
