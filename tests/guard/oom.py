# SPDX-License-Identifier: MIT
"""A real leaker in a real memory cgroup with a limit.

Control: without the guard the kernel's OOM killer kills the leaker (SIGKILL,
oom_kill counted). Then RUNS times with `leakguard guard --cgroup DIR`: the leaker
dies by the guard's SIGTERM before the kernel acts (oom_kill unchanged) and an
innocent neighbour in the same cgroup survives.

  oom.py --leakguard BIN --mem GUARD_MEM [--runs 10] [--limit-mib 256] [--rate 150]
"""

import argparse
import os
import re
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guardtest as gt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--mem", required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--limit-mib", type=int, default=256)
    ap.add_argument("--rate", type=float, default=150, help="leak rate, MiB/s")
    ap.add_argument("--neighbour-mib", type=int, default=32)
    ap.add_argument("--cgroup-version", default="auto", choices=["auto", "v1", "v2"])
    ap.add_argument("--no-control", action="store_true")
    ap.add_argument("--config", help="guard configuration file")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lgguard-oom-")
    failures = []
    with gt.Cgroup(a.limit_mib << 20, a.cgroup_version) as cg:
        print("cgroup v%d %s, limit %d MiB, leak %.0f MiB/s" % (cg.version, cg.path, a.limit_mib, a.rate))
        if not a.no_control:
            before = cg.oom_kills()
            nb = cg.spawn([a.mem, "hold", str(a.neighbour_mib)])
            gt.wait_line(nb, "ready")
            lk = cg.spawn([a.mem, "leak", str(a.rate)])
            t0 = time.time()
            rc = lk.wait(timeout=30)
            after = cg.oom_kills()
            print("control (no guard): leaker exit %s after %.2fs, oom_kill %d -> %d" %
                  (rc, time.time() - t0, before, after))
            if rc != -signal.SIGKILL or after <= before:
                failures.append("control: expected the OOM killer (SIGKILL, oom_kill+1), got exit %s, oom_kill %d -> %d"
                                % (rc, before, after))
            cg.stop_all()
            time.sleep(0.3)
        ok = 0
        for run in range(1, a.runs + 1):
            log = os.path.join(tmp, "events-%d.jsonl" % run)
            before = cg.oom_kills()
            nb = cg.spawn([a.mem, "hold", str(a.neighbour_mib)])
            gt.wait_line(nb, "ready")
            cmd = [a.leakguard, "guard", "--cgroup", cg.path, "--log", log]
            if a.config:
                cmd += ["--config", a.config]
            guard = gt.subprocess.Popen(cmd,
                                        stdout=gt.subprocess.DEVNULL, stderr=gt.subprocess.PIPE, text=True)
            if not gt.wait_event(log, lambda e: e.get("event") == "watch"):
                failures.append("run %d: guard did not start" % run)
                gt.stop(guard)
                cg.stop_all()
                continue
            time.sleep(0.3)  # a few samples of the neighbour at rest
            lk = cg.spawn([a.mem, "leak", str(a.rate)])
            t0 = time.time()
            try:
                rc = lk.wait(timeout=30)
            except gt.subprocess.TimeoutExpired:
                rc = None
            dt = time.time() - t0
            time.sleep(0.2)
            alive = nb.poll() is None
            after = cg.oom_kills()
            grc = gt.stop(guard)
            err = guard.stderr.read()
            guard.stderr.close()
            # the log action's line ends with a duration ("time to limit 3.2s", "never")
            for line in err.splitlines():
                if "time to limit " in line:
                    tail = line.rsplit("time to limit ", 1)[1]
                    if not re.fullmatch(r"never|[0-9.]+s|[0-9]+m[0-9]{2}s|[0-9.]+[hd]", tail):
                        failures.append("run %d: guard line without a duration: %s" % (run, line))
            ev = gt.read_events(log)
            kills = [e for e in ev if e.get("event") == "action" and e.get("action") == "kill"
                     and e.get("result") == "sent"]
            lvl = [e for e in ev if e.get("event") == "level"]
            victim = kills[0]["pid"] if kills else None
            peak = max((e.get("usage_bytes", 0) for e in lvl), default=0) / (1 << 20)
            good = (rc == -signal.SIGTERM and after == before and alive and victim == lk.pid
                    and grc == 0)
            ok += good
            print("run %2d: leaker exit %s after %.2fs, victim %s (leaker %d), neighbour %s, oom_kill %d -> %d, "
                  "levels %s, guard exit %s%s" %
                  (run, rc, dt, victim, lk.pid, "alive" if alive else "DEAD", before, after,
                   "/".join("%s(%s)" % (e["to"], e.get("reason")) for e in lvl), grc,
                   "" if good else " FAIL"))
            if kills:
                k = kills[0]
                print("        kill: growth %.0f MiB/s, mem %.0f MiB, chosen by %s; level-change usage peak %.0f MiB"
                      % (k.get("growth_bps", 0) / 2**20, k.get("mem_bytes", 0) / 2**20, k.get("chosen_by"), peak))
            if not good:
                failures.append("run %d failed; guard stderr: %s" % (run, err.strip()[-500:]))
            cg.stop_all()
            time.sleep(0.3)
        print("RESULT: guard stopped the leaker before the OOM killer, neighbour alive: %d/%d" % (ok, a.runs))
    if failures:
        for f in failures:
            print("FAIL: " + f)
        print("events kept in " + tmp)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
