#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What the attach cases share (attach_test.py, attach_py.py): waiting for a state,
the targets, `leakguard attach` itself, its report, a process's mappings and GOT.
A and TMP are set by attach_test.py's main for every module of the cases."""
import argparse
import ctypes
import json
import os
import re
import shutil
import shlex
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from lgtest import free_port  # noqa: E402

A = None
TMP = None


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def wait_for(pred, what, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    fail("timed out waiting for " + what)


def all_asleep(pid):
    """Every thread of PID waits in the kernel (state S): an event, where a fixed pause
    would only guess that the program reached its read() or nanosleep()."""
    try:
        tids = os.listdir("/proc/%d/task" % pid)
        states = []
        for tid in tids:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                states.append(f.read().rsplit(") ", 1)[1].split()[0])
        return bool(states) and all(st == "S" for st in states)
    except (OSError, IndexError):
        return False


def in_nanosleep(tid):
    """Thread TID of the target waits in nanosleep or clock_nanosleep (x86-64: 35, 230)."""
    try:
        with open("/proc/%d/task/%d/stat" % (tid, tid)) as f:
            state = f.read().rsplit(") ", 1)[1].split()[0]
        with open("/proc/%d/task/%d/syscall" % (tid, tid)) as f:
            nr = f.read().split()[0]
        return state == "S" and nr in ("35", "230")
    except (OSError, IndexError):
        return False


def progress(prog):
    try:
        with open(prog) as f:
            parts = f.read().split()
        return int(parts[1]) if len(parts) == 2 else None
    except (OSError, ValueError):
        return None


def progress_now(prog):
    """The counter, once the file reads whole (the target rewrites it: a read can find it
    empty)."""
    def whole():
        v = progress(prog)
        return None if v is None else [v]
    return wait_for(whole, "a whole progress line")[0]


# No thread of the target ever waits in nanosleep (its pauses are futex waits): the
# injector stops a thread at malloc or free, the path these cases are about. Without it,
# a thread sleeping in nanosleep is taken at the first stop (case_first_stop).
BUSY = {"ATTACH_NAP": "futex"}


def start_target(name, args=(), env=None):
    prog = os.path.join(TMP, name)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen([A.target, prog] + list(args), env=e)
    wait_for(lambda: progress(prog) is not None, "the target's first progress line")
    return p, prog


def runs_on(p, prog):
    """The target is alive and its progress counter moves after detach."""
    if p.poll() is not None:
        fail("the target died")
    last = progress_now(prog)
    wait_for(lambda: (progress(prog) or 0) > last, "progress after detach")


def stop(p):
    if p.poll() is None:
        p.kill()
    p.wait()


def attach(pid, db, duration, extra=(), timeout=90, user=None, cli=None, wrap=None, until_flag=False):
    """`leakguard attach --duration DURATION`; with until_flag, a recording that ends
    on an event instead: at least DURATION seconds and the leak flagged (a row in the
    database's flags table), then Ctrl-C (SIGINT: detach, as a user does). On a busy
    machine the attach and the first snapshots take longer: a fixed duration left too
    few points to find the leak (attach_python_holders failed beside CPU hogs)."""
    cmd = [cli or A.cli, "attach"] + ([] if until_flag else ["--duration", str(duration)]) + ["-o", db] + \
        list(extra) + [str(pid)]
    if wrap:
        cmd = wrap(cmd)

    def as_user():
        os.setgroups([])
        os.setgid(user)
        os.setuid(user)
    if not until_flag:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=as_user if user is not None else None)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=as_user if user is not None else None)
    t0 = time.monotonic()
    flagged = False
    while p.poll() is None and time.monotonic() - t0 < timeout / 2:
        if not flagged and os.path.exists(db):
            try:
                con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=0.5)
                flagged = con.execute("SELECT count(*) FROM flags").fetchone()[0] > 0
                con.close()
            except sqlite3.Error:
                pass
        if flagged and time.monotonic() - t0 >= duration:
            break
        time.sleep(0.05)
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def report(db):
    r = subprocess.run([A.cli, "report", db, "--format", "json"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail("report of %s: rc %d %s" % (db, r.returncode, r.stderr))
    return json.loads(r.stdout)


def leak_funcs(d):
    """The allocating function of each leak, in rank order."""
    sus = {s["rank"]: s for s in d["suspects"]}
    return [sus[lk["suspects"][0]]["site"]["function"] for lk in d["leaks"]]


def maps(pid):
    with open("/proc/%d/maps" % pid) as f:
        return f.read().splitlines()


def base_of(pid, suffix):
    for line in maps(pid):
        f = line.split()
        if len(f) >= 6 and f[5].endswith(suffix) and int(f[2], 16) == 0:
            return int(f[0].split("-")[0], 16), f[5]
    fail("no %s in process %d" % (suffix, pid))


def span_of(pid, suffix):
    lo, hi = None, None
    for line in maps(pid):
        f = line.split()
        if len(f) >= 6 and f[5].endswith(suffix):
            a, b = (int(x, 16) for x in f[0].split("-"))
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
    return lo, hi


def got_slot_of_malloc(binary):
    """The r_offset of the target executable's malloc relocation (readelf -rW)."""
    out = subprocess.run(["readelf", "-rW", binary], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 5 and ("JUMP_SLO" in f[2] or "GLOB_DAT" in f[2]) and f[4] == "malloc@GLIBC_2.2.5":
            return int(f[0], 16)
    fail("no malloc relocation in " + binary)


def sym_value(lib, name):
    out = subprocess.run(["readelf", "-sW", lib], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and f[7].split("@")[0] == name and f[6] != "UND":
            return int(f[1], 16)
    fail("no %s in %s" % (name, lib))


def read_word(pid, addr):
    with open("/proc/%d/mem" % pid, "rb") as f:
        f.seek(addr)
        return int.from_bytes(f.read(8), "little")
