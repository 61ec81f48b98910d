# SPDX-License-Identifier: MIT
"""Signal policy: a process whose cache grows toward the cgroup limit handles SIGUSR1
by freeing half of it. With the guard configured to signal (no kill) it shrinks every
time the guard asks and stays up past the time it would have hit the limit; the
kernel never OOM-kills.

  signal_policy.py --leakguard BIN --mem GUARD_MEM [--seconds 8]
"""

import argparse
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guardtest as gt  # noqa: E402

CONFIG = """
[warn]
actions = log, signal
signal = SIGUSR1
repeat = 1s
[breaker]
actions = log, publish, signal
signal = SIGUSR1
repeat = 1s
[emergency]
actions = log, publish, signal
signal = SIGUSR1
repeat = 1s
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--mem", required=True)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--limit-mib", type=int, default=256)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lgguard-sig-")
    cfg = os.path.join(tmp, "guard.ini")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    log = os.path.join(tmp, "events.jsonl")
    fails = []
    with gt.Cgroup(a.limit_mib << 20) as cg:
        before = cg.oom_kills()
        guard = gt.subprocess.Popen([a.leakguard, "guard", "--cgroup", cg.path, "--config", cfg, "--log", log],
                                    stdout=gt.subprocess.DEVNULL, stderr=gt.subprocess.PIPE, text=True)
        if not gt.wait_event(log, lambda e: e.get("event") == "watch"):
            fails.append("guard did not start")
        # grows 60 MiB/s up to 400 MiB: would pass the 256 MiB limit after ~4.3 s
        app = cg.spawn([a.mem, "cache", "60", "400"])
        gt.wait_line(app, "ready")
        time.sleep(a.seconds)
        alive = app.poll() is None
        after = cg.oom_kills()
        app.send_signal(signal.SIGTERM)
        out, _ = app.communicate(timeout=10)
        grc = gt.stop(guard)
        err = guard.stderr.read()
        guard.stderr.close()
        shrinks = [l for l in out.splitlines() if l.startswith("shrink")]
        ev = gt.read_events(log)
        sent = [e for e in ev if e.get("event") == "action" and e.get("action") == "signal" and e.get("result") == "sent"]
        kills = [e for e in ev if e.get("event") == "action" and e.get("action") in ("kill", "sigkill")]
        levels = [e["to"] for e in ev if e.get("event") == "level"]
        print("cgroup v%d: app alive after %.0fs: %s, exit on SIGTERM %s, shrinks %d (%s), signals sent %d, "
              "kills %d, oom_kill %d -> %d, levels %s, guard exit %s" %
              (cg.version, a.seconds, alive, app.returncode, len(shrinks), "; ".join(shrinks[:4]), len(sent),
               len(kills), before, after, "/".join(levels), grc))
        if not alive:
            fails.append("the app did not stay up")
        if app.returncode != 0:
            fails.append("the app did not exit cleanly on SIGTERM (%s)" % app.returncode)
        if not shrinks or not sent:
            fails.append("no SIGUSR1 shrink happened")
        if kills:
            fails.append("the guard killed although the policy only signals")
        if after != before:
            fails.append("the kernel OOM-killed")
        if grc != 0:
            fails.append("guard exit %s: %s" % (grc, err[-300:]))
    for f in fails:
        print("FAIL: " + f)
    if fails:
        print("events kept in " + tmp)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
