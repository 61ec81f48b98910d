#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""exec: a launcher (exec_chain) leaks a known amount, then runs churn_leak.

  --mode exec       execv() in place: both images are recorded as their own runs[]
                    entries with the same pid; the launcher's leak is in its entry;
                    churn_leak's planted site is reported with that pid, exactly.
  --mode spawn      fork() + execv(): the child is its own run with its own pid.
  --mode no-follow  spawn under `run --no-follow`: only the launcher is recorded.
  --mode no-follow-exec  exec under `run --no-follow`: the started process is followed
                    through its execs (a wrapper chain), as --mode exec says.
  --mode wrapper    a bash launcher runs short-lived helpers (readlink, env, a bash -c, as
                    a pyenv shim does), then execs churn_leak: the helpers are folded into
                    one line of the text report (issue #35), the report is named after
                    churn_leak (JSON main_run, the HTML title), the leak is found exactly.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402

PRE_LEAK = 300 * 2048


def extra(ap):
    ap.add_argument("--mode", choices=("exec", "spawn", "no-follow", "no-follow-exec", "wrapper"), required=True)


HELPERS = ["readlink -f /bin", "env true", "bash -c :", "/bin/true", "readlink -f /usr", "env true"]


def wrapper(t):
    target = t.bin("churn_leak")
    site = t.site("churn_leak.c")
    script = "; ".join(["%s >/dev/null" % h for h in HELPERS] + ["exec %s --seconds 2" % target])
    p = t.lg_run(["bash", "-c", script])
    t.check(p.returncode == 0, "run exits 0 (the target's status)", exit=p.returncode, stderr=p.stderr[-2000:])
    ch = lgtest.parse_kv(p.stdout, "churn_leak:")
    rep = t.report_json(p.db)
    runs = rep["runs"]
    main = runs[rep.get("main_run", -1)] if isinstance(rep.get("main_run"), int) else {}
    t.check("churn_leak" in str(main.get("command")) and main.get("helper") is False,
            "main_run is churn_leak's run, not a helper", main_run=rep.get("main_run"), runs=runs)
    helpers = [r for r in runs if r.get("helper")]
    # every image but churn_leak's: the launcher's bash, and per helper its forked bash
    # image, then the helper's own (and `env`'s exec of true)
    t.check(len(helpers) == len(runs) - 1 and len(runs) >= 2 * len(HELPERS) + 2,
            "every run but churn_leak's is a helper (at least %d)" % (2 * len(HELPERS) + 1),
            runs=[(r.get("command"), r.get("duration_s"), r.get("helper")) for r in runs])
    hits = [s for s in rep["suspects"] if site.matches((s.get("frames") or [{}])[0])]
    t.check(len(hits) == 1 and ch and hits[0].get("live_bytes") == int(ch["leaked_bytes"]),
            "churn_leak's planted site found once, exact bytes", hits=hits[:1], program=ch)
    txt = t.run([t.args.leakguard, "report", p.db]).stdout
    procs = [ln for ln in txt.splitlines() if ln.startswith("  process ")]
    t.check(len(procs) == 1 and "churn_leak" in procs[0], "the text report has one process line, churn_leak's",
            lines=procs)
    want = "  %d short-lived helper processes (each under 1 s, nothing growing): " % len(helpers)
    fold = [ln for ln in txt.splitlines() if ln.startswith(want)]
    # named by program, a forked bash image by its script ("bash -c"); the counts add up
    counts = {}
    for item in (fold[0][len(want):].split(" (")[0].split(", ") if len(fold) == 1 else []):
        name, _, n = item.rpartition(" ")
        counts[name] = int(n) if n.isdigit() else -1
    t.check(len(fold) == 1 and counts.get("readlink") == 2 and counts.get("bash -c", 0) >= len(HELPERS)
            and sum(counts.values()) == len(helpers),
            "one folded line: %s... readlink 2, bash -c >= %d, counts adding up to %d"
            % (want.strip(), len(HELPERS), len(helpers)), counts=counts, text=txt[:1500])
    html = t.run([t.args.leakguard, "report", p.db, "--format", "html"]).stdout
    title = html[html.find("<title>"):html.find("</title>")]
    t.check("churn_leak" in title and "bash" not in title, "the HTML page is named after churn_leak", title=title)
    t.check("%d short-lived helper processes" % len(helpers) in html, "the HTML page folds the helpers")
    t.finish()


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("exec-%s" % args.mode, args)
    if args.mode == "wrapper":
        wrapper(t)
    launcher = t.bin("exec_chain")
    target = t.bin("churn_leak")
    site = t.site("churn_leak.c")
    pre_site = t.site("exec_chain.c", "/* SITE:pre-exec */")
    mode = "exec" if args.mode in ("exec", "no-follow-exec") else "spawn"
    lg_extra = ["--no-follow"] if args.mode.startswith("no-follow") else []
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
    def is_l(r):
        return "exec_chain" in str(r.get("command"))

    def is_t(r):
        return "churn_leak" in str(r.get("command")) and not is_l(r)

    L = [r for r in runs if r.get("pid") == lpid]
    C = [r for r in runs if r.get("pid") != lpid]
    if args.mode == "no-follow":
        t.check(len(runs) == 1 and L and is_l(L[0]),
                "--no-follow: only the launcher is recorded", runs=runs, launcher_pid=lpid)
        bad = [s for s in rep["suspects"] if site.matches((s.get("frames") or [{}])[0])]
        t.check(not bad, "--no-follow: nothing reported from the child", suspects=bad[:3])
        t.finish()
    if mode == "exec":
        # one pid, two images: the launcher, then churn_leak
        t.check(len(runs) == 2 and len(L) == 2 and sum(map(is_l, L)) == 1
                and sum(map(is_t, L)) == 1,
                "2 runs with the launcher's pid: the launcher image, then the exec'd image",
                runs=runs, launcher_pid=lpid)
        lruns = [r for r in L if is_l(r)]
        truns = [r for r in L if is_t(r)]
    else:
        # the launcher; the forked child before execv (its command is the
        # launcher's); the child after execv (churn_leak), same pid
        t.check(len(L) == 1 and is_l(L[0]), "one run for the launcher's pid, the launcher",
                runs=runs, launcher_pid=lpid)
        t.check(len(C) == 2 and C[0].get("pid") == C[1].get("pid"),
                "2 runs with the child's pid (forked image, exec'd image)", runs=runs)
        t.check(sum(map(is_l, C)) == 1 and sum(map(is_t, C)) == 1,
                "child's forked image is labelled with the launcher's command, its exec'd "
                "image with the target's", commands=[(r.get("pid"), r.get("command")) for r in C])
        lruns = L
        truns = [r for r in C if is_t(r)][-1:]
    if not truns:
        t.fatal("a run for the exec'd target", runs=runs)
    tpid = truns[0].get("pid")
    if mode == "exec":
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
