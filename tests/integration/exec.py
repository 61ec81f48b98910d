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
                    churn_leak (JSON main_run, the HTML title). Lazy start (the default):
                    every image the launcher execs records nothing until it passes the
                    threshold, so the helpers' images store no stack at all; churn_leak
                    began late, says so, and its leak is found short by at most what it
                    allocated before. With --lazy off the same run stores the helpers'
                    stacks and finds the leak exactly.
The other modes record every image from its start (--lazy off): they check exact bytes.
"""
import os
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402

PRE_LEAK = 300 * 2048


def extra(ap):
    ap.add_argument("--mode", choices=("exec", "spawn", "no-follow", "no-follow-exec", "wrapper"), required=True)


HELPERS = ["readlink -f /bin", "env true", "bash -c :", "/bin/true", "readlink -f /usr", "env true"]


def stacks_of(db, runs):
    """The stacks each of runs stored (the report's runs are the processes in order)."""
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        n = dict(con.execute("SELECT proc, count(*) FROM stacks GROUP BY proc").fetchall())
        procs = [r[0] for r in con.execute("SELECT proc FROM processes ORDER BY proc")]
    finally:
        con.close()
    if len(procs) != len(runs):
        raise AssertionError("%d processes, %d runs" % (len(procs), len(runs)))
    for r, proc in zip(runs, procs):
        r["stacks_stored"] = n.get(proc, 0)


def prog(run):
    """A run's program: the basename of its command's first word (the command is read
    from /proc at its hello, or is its executable's path when it was already gone)."""
    return os.path.basename((str(run.get("command")) or " ").split()[0])


def wrapper_lazy_off(t, script, site):
    """The same launcher under --lazy off: every image recorded from its start."""
    p = t.lg_run(["bash", "-c", script], db=os.path.join(t.tmp, "off.db"), extra=["--lazy", "off"])
    t.check(p.returncode == 0, "--lazy off: run exits 0", exit=p.returncode, stderr=p.stderr[-2000:])
    ch = lgtest.parse_kv(p.stdout, "churn_leak:")
    rep = t.report_json(p.db)
    runs = rep["runs"]
    t.check(not [r for r in runs if "lazy" in r], "--lazy off: no image started lazily",
            runs=[(r.get("command"), r.get("lazy")) for r in runs])
    stacks_of(p.db, runs)
    rl = [r for r in runs if prog(r) == "readlink"]
    t.check(len(rl) == 2 and all(r["stacks_stored"] for r in rl),
            "--lazy off: both readlink images stored their stacks (they allocate)",
            readlink=[(r.get("command"), r["stacks_stored"]) for r in rl])
    hits = [s for s in rep["suspects"] if site.matches((s.get("frames") or [{}])[0])]
    t.check(len(hits) == 1 and ch and hits[0].get("live_bytes") == int(ch["leaked_bytes"]),
            "--lazy off: churn_leak's planted site found once, exact bytes", hits=hits[:1], program=ch)


def wrapper(t):
    target = t.bin("churn_leak")
    site = t.site("churn_leak.c")
    script = "; ".join(["%s >/dev/null" % h for h in HELPERS] + ["exec %s --seconds 2" % target])
    p = t.lg_run(["bash", "-c", script])
    t.check(p.returncode == 0, "run exits 0 (the target's status)", exit=p.returncode, stderr=p.stderr[-2000:])
    ch = lgtest.parse_kv(p.stdout, "churn_leak:")
    rep = t.report_json(p.db)
    runs = rep["runs"]
    stacks_of(p.db, runs)
    # the launcher's bash is the started command's first image, recorded from its start;
    # every image it execs (each helper's program, churn_leak) starts lazily
    waiting = [r for r in runs if r.get("lazy") == "waiting"]
    t.check(len(waiting) >= len(HELPERS) and all(r.get("helper") for r in waiting)
            and not [r for r in waiting if r["stacks_stored"]],
            "at least %d helper images never began to record, none stored a stack" % len(HELPERS),
            waiting=[(r.get("command"), r["stacks_stored"]) for r in waiting])
    rl = [r for r in runs if prog(r) == "readlink"]
    t.check(len(rl) == 2 and all(r.get("lazy") == "waiting" for r in rl), "both readlink images never began",
            readlink=rl)
    main = runs[rep.get("main_run", -1)] if isinstance(rep.get("main_run"), int) else {}
    t.check("churn_leak" in str(main.get("command")) and main.get("helper") is False,
            "main_run is churn_leak's run, not a helper", main_run=rep.get("main_run"), runs=runs)
    helpers = [r for r in runs if r.get("helper")]
    # every image but churn_leak's: the launcher's bash, and per helper its forked bash
    # image, then the helper's own (and `env`'s exec of true)
    t.check(len(helpers) == len(runs) - 1 and len(runs) >= 2 * len(HELPERS) + 2,
            "every run but churn_leak's is a helper (at least %d)" % (2 * len(HELPERS) + 1),
            runs=[(r.get("command"), r.get("duration_s"), r.get("helper")) for r in runs])
    t.check(main.get("lazy") == "began" and 0 < main.get("lazy_began_s", -1) < main.get("duration_s", 0),
            "churn_leak (exec'd) began to record lazily, during its run", main=main)
    hits = [s for s in rep["suspects"] if site.matches((s.get("frames") or [{}])[0])]
    leaked, before = int(ch["leaked_bytes"]) if ch else -1, main.get("lazy_before_bytes", -1)
    t.check(len(hits) == 1 and ch and leaked - before <= hits[0].get("live_bytes") <= leaked,
            "churn_leak's planted site found once, short of what it leaked by at most what it allocated "
            "before its recording began", hits=hits[:1], program=ch, before=before)
    txt = t.run([t.args.leakguard, "report", p.db]).stdout
    began = [ln for ln in txt.splitlines() if ln.startswith("  process ") and "recorded from " in ln
             and "(lazy start; " in ln and "allocated before it, not attributed)" in ln]
    t.check(len(began) == 1, "the text report says when churn_leak's recording began", text=txt[:1500])
    procs = [ln for ln in txt.splitlines() if ln.startswith("  process ")]
    t.check(len(procs) == 1 and "churn_leak" in procs[0], "the text report has one process line, churn_leak's",
            lines=procs)
    want = "  %d short-lived or idle helper processes (nothing growing): " % len(helpers)
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
    # the launcher's images (its bash, exec'd away at once, and the bash it forked for a
    # helper) held their start-up for a moment: not the program's memory (issue #35:
    # bash's hash_create among the largest live sites)
    peak = txt[txt.find("Largest live sites at the peak"):] if "Largest live sites at the peak" in txt else ""
    peak = peak[:peak.find("\n\n")] if "\n\n" in peak else peak
    t.check(peak and "churn_leak.c" in peak and "[bash]" not in peak,
            "the largest live sites at the peak are churn_leak's, none of a wrapper's bash", text=peak[:1500])
    t.check(rep.get("largest_at_peak") and not [s for s in rep["largest_at_peak"]
                                                if (s.get("site") or {}).get("module") == "bash"],
            "JSON largest_at_peak has sites, none in bash", sites=[s.get("site") for s in rep.get("largest_at_peak", [])])
    html = t.run([t.args.leakguard, "report", p.db, "--format", "html"]).stdout
    title = html[html.find("<title>"):html.find("</title>")]
    t.check("churn_leak" in title and "bash" not in title, "the HTML page is named after churn_leak", title=title)
    t.check("%d short-lived or idle helper processes" % len(helpers) in html, "the HTML page folds the helpers")
    wrapper_lazy_off(t, script, site)
    lazy_unwinder(t)
    t.finish()


def lazy_unwinder(t):
    """libunwind is opened when an image starts recording (capture/unwind.c): the started
    bash (recorded from its start) maps it, the cat it execs (waiting) does not; an
    exec'd mt_shlib starts its worker threads before its recording begins, and its leak,
    in a worker, still has its native callers (opened before the first thread)."""
    p = t.lg_run(["bash", "-c", "grep -c /libunwind /proc/$$/maps; exec cat /proc/self/maps"],
                 db=os.path.join(t.tmp, "maps.db"))
    out = p.stdout.split("\n", 1)
    cat_maps = out[1] if len(out) == 2 else ""
    t.check(p.returncode == 0 and out[0].strip().isdigit() and int(out[0]) >= 1,
            "the started bash, recorded from its start, maps libunwind", out=p.stdout[:300], stderr=p.stderr[-500:])
    t.check("libleakguard.so" in cat_maps and "/libunwind" not in cat_maps and "/liblzma" not in cat_maps,
            "the cat it execs (waiting to record) maps libleakguard.so but neither libunwind nor liblzma",
            maps=[ln for ln in cat_maps.splitlines() if ".so" in ln][:20])
    site = t.site("codec.c")
    p = t.lg_run(["bash", "-c", "exec %s --seconds 2" % t.bin("mt_shlib")], db=os.path.join(t.tmp, "mt.db"))
    t.check(p.returncode == 0, "mt_shlib under bash -c exits 0", exit=p.returncode, stderr=p.stderr[-1000:])
    rep = t.report_json(p.db)
    hits = [s for s in rep["suspects"] if site.matches((s.get("frames") or [{}])[0])]
    callers = [f for f in (hits[0].get("frames") or [])[1:] if str(f.get("file", "")).endswith("mt_shlib.c")] \
        if hits else []
    t.check(len(hits) == 1 and callers, "mt_shlib's leak in codec.c, called from mt_shlib.c (threads began first)",
            frames=[(f.get("function"), f.get("file"), f.get("line")) for f in (hits[0].get("frames") if hits else [])][:8],
            suspects=[(s.get("frames") or [{}])[0] for s in rep["suspects"]][:5])


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
    # exact bytes in every image: recorded from its start (wrapper mode shows the lazy start)
    lg_extra = ["--lazy", "off"] + (["--no-follow"] if args.mode.startswith("no-follow") else [])
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
