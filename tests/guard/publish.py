# SPDX-License-Identifier: MIT
"""Publishing: a process running with the recorder (`leakguard run`) gets the guard's
level in its shared region (guard_level, guard_seq bumped, evict_request at
emergency), read back here through /proc/PID/fd the way the guard finds it; the exec
action's command gets the level, its source, usage and limit in its environment.

  publish.py --leakguard BIN --mem GUARD_MEM
"""
import argparse
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guardtest as gt  # noqa: E402

MAGIC = 0x4e4f494745524c47
OFF_LEVEL = 60  # lg_region_hdr_t: guard_level u32 @60, guard_seq u64 @64, evict_request u64 @72


def region_path(pid):
    """The path under /proc of pid's recorder region (the way the guard finds it), or None."""
    for fd in os.listdir("/proc/%d/fd" % pid):
        p = "/proc/%d/fd/%s" % (pid, fd)
        try:
            if "/memfd:leakguard-region" not in os.readlink(p):
                continue
            with open(p, "rb") as f:
                if struct.unpack_from("<Q", f.read(8), 0)[0] == MAGIC:
                    return p
        except OSError:
            continue
    return None


def region(pid):
    """(guard_level, guard_seq, evict_request) of pid's region, or None."""
    p = region_path(pid)
    try:
        with open(p, "rb") as f:
            return struct.unpack_from("<IQQ", f.read(80), OFF_LEVEL)
    except (OSError, TypeError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--mem", required=True)
    a = ap.parse_args()
    a.leakguard, a.mem = os.path.abspath(a.leakguard), os.path.abspath(a.mem)
    tmp = tempfile.mkdtemp(prefix="lgguard-pub-")
    fails = []
    run = subprocess.Popen([a.leakguard, "run", "-o", os.path.join(tmp, "r.db"), "--", a.mem, "hold", "8"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp)
    try:
        gt.wait_line(run, "ready")
        target = None
        for _ in range(50):  # the child of `leakguard run` holding a region
            for d in gt.children(run.pid):
                if region(d):
                    target = d
            if target:
                break
            time.sleep(0.1)
        if not target:
            print("SKIP: no recorded process with a region found (recorder not available)")
            return gt.SKIP
        lvl0 = region(target)
        # limit below its RSS: emergency at once; publish only (no kill)
        # and an exec action's command: the level, source, usage and limit in its
        # environment, none of the guard's own LEAKGUARD_* variables
        envfile = os.path.join(tmp, "exec.env")
        cfg = os.path.join(tmp, "g.ini")
        with open(cfg, "w") as f:
            f.write("[guard]\nlimit = 4M\n[emergency]\nactions = log, publish, exec\n"
                    "command = env > %s.tmp && mv %s.tmp %s\nrepeat = 0\n" % (envfile, envfile, envfile))
        log = os.path.join(tmp, "ev.jsonl")
        g = subprocess.Popen([a.leakguard, "guard", "--pid", str(target), "--config", cfg, "--log", log],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=dict(os.environ, LEAKGUARD_NOT_FOR_COMMANDS="1"))
        e = gt.wait_event(log, lambda e: e.get("action") == "publish")
        for _ in range(100):
            if os.path.exists(envfile):
                break
            time.sleep(0.05)
        time.sleep(0.3)
        lvl1 = region(target)
        gt.stop(g)
        env = {}
        if os.path.exists(envfile):
            with open(envfile) as f:
                env = dict(ln.split("=", 1) for ln in f.read().splitlines() if ln.startswith("LEAKGUARD_"))
        print("exec action's LEAKGUARD_* environment: %s" % env)
        if not (sorted(env) == ["LEAKGUARD_LEVEL", "LEAKGUARD_LIMIT", "LEAKGUARD_SOURCE", "LEAKGUARD_USAGE"] and
                env["LEAKGUARD_LEVEL"] == "emergency" and env["LEAKGUARD_LIMIT"] == str(4 << 20) and
                env["LEAKGUARD_USAGE"].isdigit() and int(env["LEAKGUARD_USAGE"]) > 4 << 20 and env["LEAKGUARD_SOURCE"]):
            fails.append("the exec action's command did not get exactly LEAKGUARD_LEVEL=emergency, _SOURCE, "
                         "_USAGE (over the limit) and _LIMIT=4194304")
        print("region before %s, during the guard %s, event %s" % (lvl0, lvl1, e))
        if not (lvl0 and lvl0[0] == 0):
            fails.append("initial level not normal")
        if not (e and e.get("regions") == 1 and lvl1 and lvl1[0] == 3 and lvl1[1] > lvl0[1] and lvl1[2] > 0):
            fails.append("emergency (3), a bumped seq and evict_request were not published")
            # what the guard decided meanwhile (a level back to normal: its reason, usage)
            if os.path.exists(log):
                with open(log) as f:
                    print("guard events:\n" + "".join(ln for ln in f if '"event":"level"' in ln.replace(" ", "")))
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
            try:
                run.wait(timeout=10)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
    for f in fails:
        print("FAIL: " + f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
