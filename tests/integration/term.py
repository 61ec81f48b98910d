#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The live view shares the terminal (issue #35 item 1), in tmux.

`leakguard run -- ticker` (tests/scenarios/ticker.c: a numbered line every 0.1 s for
3 s, a small leak) in tmux panes of 80x24 and 120x24, and one of 80x24 resized while it
runs (to 120x30, then to 72x20; the program waits at a gate while the test resizes, so
that the view's region is set up again before it prints on). Then the pane with its
history (capture-pane -S -): every line the program printed is there, in order, exactly
once; no line of the live view is left (only the final report), and the scroll region
is reset.

The three panes run at once in one private tmux server (-L, its socket in the test's
directory), which is killed at the end whatever happens. Every wait is for an event
(tmux wait-for, the pane's scroll region), with a deadline.
"""

import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402

LINES = 30
# a line of the live view: its header, the table's header and rows, the empty table
STATUS = re.compile(r"^leakguard +\d+\.\ds |GROWTH/s +LIVE|no growing allocation site yet|"
                    r"^ +[\d.]+ [KMGT]?i?B +[\d.]+ [KMGT]?i?B +[a-z-]+ +\S")


class Tmux:
    def __init__(self, t):
        self.t = t
        self.sock = "lgtest-%d" % os.getpid()
        self.env = dict(os.environ, TMUX_TMPDIR=t.tmp)
        self.env.pop("TMUX", None)
        self.conf = t.path("tmux.conf")
        with open(self.conf, "w") as f:
            f.write("set -g history-limit 10000\nset -g remain-on-exit on\nset -g status off\n")

    def __call__(self, *args, timeout=30):
        return subprocess.run(["tmux", "-L", self.sock, "-f", self.conf] + list(args), env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)

    def fmt(self, target, f):
        return self("display-message", "-p", "-t", target, f).stdout.strip()

    def wait(self, what, cond, deadline):
        while time.monotonic() < deadline:
            if cond():
                return True
            time.sleep(0.02)
        self.t.check(False, what)
        return False

    def kill(self):
        try:
            self("kill-server", timeout=10)
        except subprocess.TimeoutExpired:
            pass


def region_set(tm, s, height):
    """The pane is height rows and the view's region is set (its last line above the bottom)."""
    v = tm.fmt(s, "#{pane_height} #{scroll_region_lower}").split()
    return len(v) == 2 and int(v[0]) == height and int(v[1]) < height - 1


def check_pane(t, tm, s, width):
    cap = tm("capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t", s).stdout
    lines = cap.splitlines()
    expect = ["tick %03d of %03d loss %.4f" % (i, LINES, 1.0 / i) for i in range(1, LINES + 1)] + ["ticker done"]
    got = [ln.rstrip() for ln in lines if re.search(r"tick \d{3} of|ticker done", ln)]
    t.check(got == expect, "%s: every program line on the terminal, in order, exactly once" % s,
            missing=[e for e in expect if e not in got], extra=[g for g in got if g not in expect],
            screen=cap[-3000:])
    stale = [ln for ln in lines if STATUS.search(ln)]
    t.check(not stale, "%s: no line of the live view left (%d columns)" % (s, width), stale=stale[:10],
            screen=cap[-3000:])
    t.check(any(ln.startswith("leakguard report: ") for ln in lines) and "Recorded in " in cap,
            "%s: the final report follows the program's lines" % s, screen=cap[-3000:])
    end = max(i for i, ln in enumerate(lines) if ln.rstrip() == "ticker done") if "ticker done" in got else -1
    rep = next((i for i, ln in enumerate(lines) if ln.startswith("leakguard report: ")), -1)
    t.check(0 <= end < rep, "%s: the report comes after the program's last line" % s, done=end, report=rep)
    t.check("[leakguard exit 0]" in cap, "%s: leakguard exits 0" % s, screen=cap[-1000:])
    v = tm.fmt(s, "#{scroll_region_upper} #{scroll_region_lower} #{pane_height}").split()
    t.check(len(v) == 3 and v[0] == "0" and int(v[1]) == int(v[2]) - 1,
            "%s: the whole screen scrolls again (the region reset)" % s, region=v)


def main():
    args = lgtest.parse_args()
    t = lgtest.Test("term-live-view", args)
    ticker = t.bin("ticker")
    if subprocess.run(["sh", "-c", "command -v tmux"], stdout=subprocess.DEVNULL).returncode != 0:
        t.fatal("tmux is installed (scripts/deps.sh)")
    tm = Tmux(t)
    gate = t.path("gate")
    cases = [("w80", 80, 24, []), ("w120", 120, 24, []), ("resized", 80, 24, [(10, 120, 30), (20, 72, 20)])]
    try:
        for name, w, h, steps in cases:
            argv = [args.leakguard, "run", "-o", t.path(name + ".db"), "--", ticker, "--lines", str(LINES)]
            if steps:
                argv += ["--gate-at", ",".join(str(s[0]) for s in steps), "--gate", gate]
            # the pane's shell: the run, then the channel the test waits on
            cmd = "cd %s && %s; echo \"[leakguard exit $?]\"; tmux wait-for -S done-%s" % (t.tmp, " ".join(argv), name)
            print("  $ (tmux %dx%d) %s" % (w, h, " ".join(argv)), flush=True)
            r = tm("new-session", "-d", "-s", name, "-x", str(w), "-y", str(h), cmd)
            if r.returncode != 0:
                t.fatal("tmux starts a %dx%d session" % (w, h), stderr=r.stderr)
        deadline = time.monotonic() + 60
        for name, w, h, steps in cases:
            if not steps:
                continue
            tm.wait("%s: the view's region is set up" % name, lambda: region_set(tm, name, h), deadline)
            for at, nw, nh in steps:
                line = "tick %03d " % at
                tm.wait("%s: the program printed line %d" % (name, at),
                        lambda: line in tm("capture-pane", "-p", "-t", name).stdout, deadline)
                tm("resize-window", "-t", name, "-x", str(nw), "-y", str(nh))
                tm.wait("%s: the view's region is set up again at %dx%d" % (name, nw, nh),
                        lambda: region_set(tm, name, nh), deadline)
                open("%s.%d" % (gate, at), "w").close()
        for name, w, h, steps in cases:
            try:
                tm("wait-for", "done-" + name, timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                t.fatal("%s: the run ends within 60 s" % name,
                        screen=tm("capture-pane", "-p", "-t", name).stdout[-3000:])
        for name, w, h, steps in cases:
            check_pane(t, tm, name, steps[-1][1] if steps else w)
    finally:
        tm.kill()
    t.finish()


if __name__ == "__main__":
    main()
