# SPDX-License-Identifier: MIT
"""Bad input for `leakguard guard`: clear message, non-zero exit where it cannot go
on, and it keeps watching the rest where it can.

  badinput.py --leakguard BIN --mem GUARD_MEM [--fake-nvml LIB]
Cases: malformed config (line + reason), bad command line, a cgroup that disappears,
a PID that exits, an unreadable cgroup file, absent NVML (one message) and a stand-in
NVML library, the metrics port in use (when built with the exporter).
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guardtest as gt  # noqa: E402

fails = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails.append(what)


def run(argv, timeout=20, env=None):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def check_config(lg, tmp):
    """Malformed config: file, line and reason; exit 2."""
    cfg = os.path.join(tmp, "bad.ini")
    with open(cfg, "w") as f:
        f.write("[guard]\ninterval = 100ms\n\n[levels]\nbreaker = 97 percent\n")
    rc, _, err = run([lg, "guard", "--config", cfg, "--duration", "1"])
    check(rc == 2 and "%s:5: breaker: '97 percent' is not a percentage" % cfg in err,
          "malformed config: exit 2, line and reason (%s)" % err.strip())
    with open(cfg, "w") as f:
        f.write("[emergency]\nactions = log, kil\n")
    rc, _, err = run([lg, "guard", "--config", cfg])
    check(rc == 2 and ":2: unknown action 'kil'" in err, "unknown action: line and reason (%s)" % err.strip())
    rc, _, err = run([lg, "guard", "--config", os.path.join(tmp, "missing.ini")])
    check(rc == 2 and "cannot open: No such file or directory" in err, "missing config (%s)" % err.strip())


def check_command_line(lg, tmp):
    """Bad command line: exit 2."""
    rc, _, err = run([lg, "guard", "--frobnicate"])
    check(rc == 2 and "unknown option '--frobnicate'" in err, "unknown option: exit 2")
    rc, _, err = run([lg, "guard", "--pid", "2147483000"])
    check(rc == 2 and "no such process" in err, "--pid of no process: exit 2 (%s)" % err.strip())
    rc, _, err = run([lg, "guard", "--cgroup", tmp])
    check(rc == 2 and "not a memory cgroup" in err, "--cgroup of a plain directory: exit 2 (%s)" % err.strip())


def check_fake_cgroup(lg, mem, tmp, procs):
    """A fake v1 cgroup directory that becomes unreadable, then disappears, while a
    watched PID exits: the guard keeps watching what is left, then exits 1."""
    fake = os.path.join(tmp, "fakecg")
    os.mkdir(fake)
    usage = os.path.join(fake, "memory.usage_in_bytes")
    with open(usage, "w") as f:
        f.write("1048576\n")
    with open(os.path.join(fake, "memory.limit_in_bytes"), "w") as f:
        f.write("268435456\n")
    with open(os.path.join(fake, "cgroup.procs"), "w") as f:
        f.write("")
    holder = subprocess.Popen([mem, "hold", "4"], stdout=subprocess.PIPE, text=True)
    procs.append(holder)
    gt.wait_line(holder, "ready")
    log = os.path.join(tmp, "ev.jsonl")
    g = subprocess.Popen([lg, "guard", "--cgroup", fake, "--pid", str(holder.pid), "--log", log],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs.append(g)
    check(gt.wait_event(log, lambda e: e.get("event") == "watch_pid") is not None, "guard started")
    time.sleep(0.3)
    with open(usage, "w") as f:
        f.write("garbage\n")
    e = gt.wait_event(log, lambda e: e.get("event") == "read_error")
    check(e is not None and g.poll() is None, "unreadable file: read_error event, still running (%s)" % e)
    with open(usage, "w") as f:
        f.write("1048576\n")
    check(gt.wait_event(log, lambda e: e.get("event") == "read_ok") is not None, "file readable again: read_ok")
    shutil.rmtree(fake)
    e = gt.wait_event(log, lambda e: e.get("event") == "source_lost")
    time.sleep(0.3)
    check(e is not None and e.get("reason") == "cgroup removed" and g.poll() is None,
          "cgroup disappears: source_lost, still watching the pid (%s)" % e)
    holder.kill()
    holder.wait()
    e = gt.wait_event(log, lambda e: e.get("event") == "pid_exit")
    check(e is not None and e.get("pid") == holder.pid, "pid exits: pid_exit event")
    try:
        grc = g.wait(timeout=5)
    except subprocess.TimeoutExpired:
        grc = None
    err = g.stderr.read()
    check(grc == 1 and "nothing left to watch" in err, "nothing left: exit 1 (%s, %s)" % (grc, err.strip()[-200:]))


def check_real_cgroup(lg, tmp, procs):
    """The same with a real cgroup (root; skipped otherwise)."""
    if os.geteuid() != 0:
        return
    try:
        cg = gt.Cgroup(256 << 20)
    except SystemExit:
        cg = None
    if not cg:
        return
    sleeper = subprocess.Popen(["sleep", "30"])
    procs.append(sleeper)
    log2 = os.path.join(tmp, "ev2.jsonl")
    g = subprocess.Popen([lg, "guard", "--cgroup", cg.path, "--pid", str(sleeper.pid), "--log", log2],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs.append(g)
    gt.wait_event(log2, lambda e: e.get("event") == "watch_pid")
    time.sleep(0.3)
    cg.close()
    e = gt.wait_event(log2, lambda e: e.get("event") == "source_lost")
    time.sleep(0.3)
    check(e is not None and g.poll() is None, "real cgroup removed: source_lost, guard goes on")
    g.send_signal(signal.SIGTERM)
    grc = g.wait(timeout=5)
    check(grc == 0, "SIGTERM: clean exit 0 (%s)" % grc)
    g.stderr.close()


def check_nvml(lg, fake_nvml, tmp, procs):
    """NVML absent: one clear message; stand-in NVML (FAKE_NVML, if given): a gpu0 source."""
    env = dict(os.environ, LEAKGUARD_NVML="libnvidia-ml-absent.so.1")
    rc, out, err = run([lg, "guard", "--duration", "0.5"], env=env)
    check(rc == 0 and err.count("GPU source off") == 1, "absent NVML: one message, exit 0 (%s)" % err.strip())
    if not fake_nvml:
        return
    st = os.path.join(tmp, "nvml.txt")
    with open(st, "w") as f:
        f.write("%d %d\n" % (78 << 30, 80 << 30))  # 97.5 % used
    sleeper = subprocess.Popen(["sleep", "30"])
    procs.append(sleeper)
    env = dict(os.environ, LEAKGUARD_NVML=fake_nvml, LEAKGUARD_FAKE_NVML=st)
    rc, out, err = run([lg, "guard", "--pid", str(sleeper.pid), "--duration", "1"], env=env)
    ev = [__import__("json").loads(l) for l in out.splitlines() if l.startswith("{")]
    w = [e for e in ev if e.get("event") == "watch" and e.get("source") == "gpu0"]
    lv = [e for e in ev if e.get("event") == "level" and e.get("source") == "gpu0" and e.get("to") == "emergency"]
    k = [e for e in ev if e.get("event") == "action" and e.get("action") == "kill"]
    check(rc == 0 and w and lv and k and k[0].get("result") == "no candidate in the watched set"
          and sleeper.poll() is None,
          "stand-in NVML: gpu0 watched, emergency at 97.5 %, no process of the watched set uses it: none killed")


def check_metrics(lg, tmp, procs):
    """The metrics port in use, and the metrics served (when built with the exporter)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    rc, _, err = run([lg, "guard", "--metrics", "127.0.0.1:%d" % port, "--duration", "1"])
    s.close()
    if "no Prometheus exporter" in err:
        print("skip metrics cases: " + err.strip())
        return
    check(rc == 1 and str(port) in err, "metrics port in use: exit 1 with a message (%s)" % err.strip())
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    g = subprocess.Popen([lg, "guard", "--metrics", "127.0.0.1:%d" % port, "--log", os.path.join(tmp, "m.jsonl")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs.append(g)
    body = ""
    for _ in range(50):
        try:
            body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2).read().decode()
            # the series of the sources appear after the first tick
            if all(k in body for k in ("leakguard_guard_level ", "leakguard_memory_pressure_avg10{",
                                       "leakguard_time_to_oom_seconds{")):
                break
        except OSError:
            pass
        time.sleep(0.1)
    g.send_signal(signal.SIGTERM)
    g.wait(timeout=5)
    g.stderr.close()
    check("leakguard_guard_level 0" in body and "leakguard_guard_actions_total{action=\"kill\"} 0" in body
          and "leakguard_memory_pressure_avg10{" in body and "leakguard_time_to_oom_seconds{" in body,
          "metrics served: guard level, actions, PSI, time to OOM")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--mem", required=True)
    ap.add_argument("--fake-nvml")
    a = ap.parse_args()
    lg = a.leakguard
    tmp = tempfile.mkdtemp(prefix="lgguard-bad-")
    procs = []  # every process started: killed at the end if still running
    try:
        check_config(lg, tmp)
        check_command_line(lg, tmp)
        check_fake_cgroup(lg, a.mem, tmp, procs)
        check_real_cgroup(lg, tmp, procs)
        check_nvml(lg, a.fake_nvml, tmp, procs)
        check_metrics(lg, tmp, procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if fails:
        print("%d failure(s); files in %s" % (len(fails), tmp))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
