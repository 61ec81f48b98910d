#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What an attach costs the churn program, apart from the VM's noise (BENCHMARKS.md,
"Attach": sampled attach <= 1.3x, after detach <= 1.02x).

usage: attach_cost.py BUILD_DIR [--rounds 8] [--window 1.5] [--sample 512k]
                      [--agent AGENT.so] [--nap futex] [--no-trim]

Two copies of the churn program (tests/attach/target.c, ATTACH_CHURN_ONLY=1: three threads
hammering malloc/free; its main thread sleeps in nanosleep between progress lines, where
the injector loads the agent; `--nap futex`: it waits on a futex instead, and the agent
is loaded in a hammering thread stopped at malloc or free) run, one at a time: the other is held by SIGSTOP, so that they
never share the two cores. Each window lets one run for WINDOW seconds and reads its
work exactly: the progress counter from its memory (/proc/PID/mem at the symbol
`progress`, not the file it rewrites every 50 ms) and the CPU time of its threads
(/proc/PID/task/*/schedstat, in ns). Its rate is work per CPU second (what the hooks cost
the target, whatever else the machine runs) and work per second of wall time.

1. before: ROUNDS windows of the control C and of the target T, alternately;
2. attached: ROUNDS attaches of T (`-s SAMPLE`), each with a window of T just before
   (bare) and one from 1 s into the attach; the slowdown of each is bare / attached.
   After each, C runs alone as long as T did: the churn threads' heaps sit at glibc's
   trim threshold and now and then start trimming by themselves (a copy never attached:
   ~900 page faults a second in 2 of 9 seconds sampled over a minute), more likely the
   longer they have run, so both copies run alike (`--no-trim` takes that out: both
   with glibc.malloc.trim_threshold=1 GiB);
3. after: the ROUNDS alternating windows of step 1 again, now that T has been attached
   and detached ROUNDS times. The cost after detach is the median of T/C before over the
   median of T/C after: the control takes out the machine's drift between the two.
"""
import argparse
import glob
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def symbol_offset(binary, name):
    out = subprocess.run(["nm", binary], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[2] == name:
            return int(f[0], 16)
    raise SystemExit("no symbol %s in %s" % (name, binary))


class Target:
    def __init__(self, binary, workdir, tag, off, nap=None, tunables=None):
        self.prog = os.path.join(workdir, tag)
        if os.path.exists(self.prog):
            os.unlink(self.prog)
        env = dict(os.environ, ATTACH_CHURN_ONLY="1")
        if nap:
            env["ATTACH_NAP"] = nap
        if tunables:
            env["GLIBC_TUNABLES"] = tunables
        self.p = subprocess.Popen([binary, self.prog], env=env)
        for _ in range(500):
            if os.path.exists(self.prog):
                break
            time.sleep(0.01)
        real = os.path.realpath(binary)
        with open("/proc/%d/maps" % self.p.pid) as f:
            base = [int(l.split("-")[0], 16) for l in f if l.rstrip().endswith(real)]
        if not base:
            raise SystemExit("%s did not start" % binary)
        self.addr = min(base) + off
        self.mem = open("/proc/%d/mem" % self.p.pid, "rb", buffering=0)

    def faults(self):
        """minor page faults of the whole process so far"""
        with open("/proc/%d/stat" % self.p.pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[7])

    def read(self):
        """(progress count, CPU ns of all its threads, monotonic s)"""
        self.mem.seek(self.addr)
        count = int.from_bytes(self.mem.read(8), "little")
        cpu = 0
        for st in glob.glob("/proc/%d/task/*/schedstat" % self.p.pid):
            try:
                with open(st) as f:
                    cpu += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # a thread that ended meanwhile
        return count, cpu, time.monotonic()

    def cont(self):
        os.kill(self.p.pid, signal.SIGCONT)

    def stop(self):
        os.kill(self.p.pid, signal.SIGSTOP)

    def window(self, w, settle=0.3):
        """(work per CPU s, work per wall s, page faults per s) over a window of w seconds"""
        time.sleep(settle)
        c0, n0, t0 = self.read()
        f0 = self.faults()
        time.sleep(w)
        c1, n1, t1 = self.read()
        f1 = self.faults()
        return (c1 - c0) / ((n1 - n0) / 1e9), (c1 - c0) / (t1 - t0), (f1 - f0) / (t1 - t0)

    def alone(self, other, w):
        other.stop()
        self.cont()
        r = self.window(w)
        self.stop()
        return r

    def rss_kib(self):
        with open("/proc/%d/status" % self.p.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def kill(self):
        self.p.kill()
        self.p.wait()


def alternate(t, c, rounds, w):
    cpu, wall, flt = [], [], [0.0, 0.0]
    for _ in range(rounds):
        rc = c.alone(t, w)
        rt = t.alone(c, w)
        cpu.append(rt[0] / rc[0])
        wall.append(rt[1] / rc[1])
        flt[0] += rt[2] / rounds
        flt[1] += rc[2] / rounds
    return cpu, wall, flt


def fmt(v):
    return "median %.3f [%s]" % (statistics.median(v), " ".join("%.3f" % x for x in v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--window", type=float, default=1.5)
    ap.add_argument("--sample", default="512k")
    ap.add_argument("--agent", help="LEAKGUARD_AGENT for the attaches (another build's agent)")
    ap.add_argument("--nap", help="ATTACH_NAP for both copies (futex: no thread sleeps in nanosleep)")
    ap.add_argument("--no-trim", action="store_true",
                    help="both copies with glibc.malloc.trim_threshold=1 GiB: heaps never trimmed")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    cli = os.path.join(build, "bin", "leakguard")
    binary = os.path.join(build, "tests", "attach_target")
    off = symbol_offset(binary, "progress")
    env = dict(os.environ)
    if a.agent:
        env["LEAKGUARD_AGENT"] = os.path.abspath(a.agent)
    with tempfile.TemporaryDirectory(prefix="lg-attach-cost-") as d:
        tun = "glibc.malloc.trim_threshold=1073741824" if a.no_trim else None
        t = Target(binary, d, "T", off, a.nap, tun)
        c = Target(binary, d, "C", off, a.nap, tun)
        try:
            time.sleep(0.5)
            pre_cpu, pre_wall, pre_flt = alternate(t, c, a.rounds, a.window)
            slow_cpu, slow_wall, rss = [], [], []
            c.stop()
            for i in range(a.rounds):
                began = time.monotonic()
                t.cont()
                bare = t.window(a.window)
                rss0 = t.rss_kib()
                att = subprocess.Popen([cli, "attach", "--duration", str(a.window + 1.6), "-s", a.sample, "-q",
                                        "-o", os.path.join(d, "s%d.db" % i), str(t.p.pid)], env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                during = t.window(a.window, settle=1.0)
                rss.append(t.rss_kib() - rss0)
                _, err = att.communicate(timeout=120)
                if att.returncode != 0:
                    raise SystemExit("attach %d: rc %d: %s" % (i, att.returncode, err.strip()))
                slow_cpu.append(bare[0] / during[0])
                slow_wall.append(bare[1] / during[1])
                t.stop()
                # the control runs as long: the churn threads' heaps also start trimming
                # by themselves now and then, more likely the longer they have run
                ran = time.monotonic() - began
                c.cont()
                time.sleep(ran)
                c.stop()
            post_cpu, post_wall, post_flt = alternate(t, c, a.rounds, a.window)
            print("target / control before, per CPU s: %s" % fmt(pre_cpu))
            print("target / control after,  per CPU s: %s" % fmt(post_cpu))
            print("slowdown attached -s %s, per CPU s:   %s" % (a.sample, fmt(slow_cpu)))
            print("slowdown attached -s %s, per wall s:  %s" % (a.sample, fmt(slow_wall)))
            print("cost after %d detaches, per CPU s:  %.3fx (per wall s: %.3fx)" %
                  (a.rounds, statistics.median(pre_cpu) / statistics.median(post_cpu),
                   statistics.median(pre_wall) / statistics.median(post_wall)))
            print("page faults a second, target / control: before %.0f / %.0f, after %.0f / %.0f "
                  "(thousands: a heap trimmed and regrown, see attach_heap.py)" % (pre_flt[0], pre_flt[1],
                                                                                   post_flt[0], post_flt[1]))
            print("agent memory (VmRSS attached - bare): median %+d KiB, max %+d KiB" %
                  (statistics.median(rss), max(rss)))
        finally:
            t.kill()
            c.kill()


if __name__ == "__main__":
    sys.exit(main())
