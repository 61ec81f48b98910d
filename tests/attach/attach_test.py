#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Tests of `leakguard attach` (issue #14; tests/attach.cmake, docs/attach.md).

usage: attach_test.py CASE --cli LEAKGUARD --target TARGET [--leaky LIB] [--static BIN] [--cycles N]

Cases: cycles, first_stop, got, loaders, kill_cli, fork, dlopen_lib, preattach, errors, python, python_holders, python_small,
python_blocked, python_torch, other_user, idle, futex, futex_loader, metrics, guard.
Every wait polls for a state with a generous deadline; nothing asserts a duration.
"""
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attach_common  # noqa: E402
import attach_py  # noqa: E402
from attach_common import *  # noqa: E402,F401,F403
from attach_py import case_python, case_python_blocked, case_python_holders, case_python_small, case_python_torch  # noqa: E402,F401,E501

A = None
TMP = None


# ---------------------------------------------------------------------- cases


def case_cycles():
    """A target inside malloc (3 hammering threads, malloc_trim and dlopen/dlclose loops,
    threads starting and exiting): N short attach/detach cycles, then one long enough for
    the detector. No hang, no crash, progress keeps moving, the planted leak at rank 1."""
    p, prog = start_target("cycles", env=BUSY)
    try:
        last = progress_now(prog)
        for i in range(A.cycles):
            r = attach(p.pid, os.path.join(TMP, "c%d.db" % i), 0.3, ["-q"])
            if r.returncode != 0:
                fail("cycle %d: rc %d: %s" % (i, r.returncode, r.stderr))
            if p.poll() is not None:
                fail("cycle %d: the target died: %s" % (i, p.returncode))
            wait_for(lambda: (progress(prog) or 0) > last, "progress after cycle %d" % i)
            last = progress_now(prog)
        db = os.path.join(TMP, "long.db")
        r = attach(p.pid, db, 3, until_flag=True)
        if r.returncode != 0:
            fail("long attach: rc %d: %s" % (r.returncode, r.stderr))
        if "Recording began at attach" not in r.stdout:
            fail("the report does not say when recording began:\n" + r.stdout)
        # the shape beside the verdict: of the recording since attach, or of its leak's tail
        if not re.search(r"memory curve (since attach|from [0-9.]+s on): ", r.stdout):
            fail("the process's memory curve does not say it is since attach:\n" + r.stdout)
        funcs = leak_funcs(report(db))
        if not funcs or funcs[0] != "leak_here":
            fail("rank 1 is not leak_here: %s\n%s" % (funcs, r.stdout))
        wait_for(lambda: (progress(prog) or 0) > last, "progress after the long attach")
        if p.poll() is not None:
            fail("the target died")
    finally:
        stop(p)
    print("ok: %d cycles and a long attach, leak_here at rank 1" % A.cycles)


def case_first_stop():
    """A thread already waiting in nanosleep, its stack clean, is taken at the first stop,
    before any breakpoint: the agent loads in the sleeping main thread, not in one of the
    three threads hammering malloc (ld.so's allocations for it stay in the loading
    thread's malloc arena, and a busy thread's heap was moved by them)."""
    # The main thread naps 3 s between progress lines, and the attach starts once it is
    # asleep in clock_nanosleep: with 50-ms naps, beside CPU hogs it was now and then
    # woken and waiting for a CPU when the injector stopped it, and the injector (rightly)
    # took the breakpoint path (1 attach in 10 here).
    p, prog = start_target("first", env={"ATTACH_CHURN_ONLY": "1", "ATTACH_MAIN_NAP_MS": "3000"})
    try:
        wait_for(lambda: in_nanosleep(p.pid), "the main thread asleep in nanosleep")
        r = subprocess.run([A.cli, "attach", "--duration", "0.3", "-o", os.path.join(TMP, "first.db"), str(p.pid)],
                           capture_output=True, text=True, timeout=60, env=dict(os.environ, LG_INJECT_DEBUG="1"))
        if r.returncode != 0:
            fail("rc %d: %s" % (r.returncode, r.stderr))
        if "idle: loaded in a waiting thread" not in r.stderr:
            fail("not loaded in a waiting thread:\n" + r.stderr)
        if "loading thread %d\n" % p.pid not in r.stderr:
            fail("the loading thread is not the sleeping main thread %d:\n%s" % (p.pid, r.stderr))
        runs_on(p, prog)
    finally:
        stop(p)
    print("ok: loaded in the sleeping main thread at the first stop")


def case_got():
    """The executable's malloc slot points into the agent while attached and holds glibc's
    malloc again after detach (read through /proc/PID/mem)."""
    p, prog = start_target("got", env=BUSY)
    try:
        slot = base_of(p.pid, os.path.basename(A.target))[0] + got_slot_of_malloc(A.target)
        libc_base, libc = base_of(p.pid, "libc.so.6")
        real = libc_base + sym_value(libc, "malloc")
        if read_word(p.pid, slot) != real:
            fail("before attach the slot is %#x, not glibc's malloc %#x" % (read_word(p.pid, slot), real))
        cli = subprocess.Popen([A.cli, "attach", "--duration", "60", "-q", "-o", os.path.join(TMP, "got.db"),
                                str(p.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        def patched():
            if p.poll() is not None:
                cli.kill()
                out, err = cli.communicate(timeout=60)
                fail("the target died (status %s) while being attached; attach said: %s" % (p.returncode, err))
            return read_word(p.pid, slot) != real
        wait_for(patched, "the slot to be patched")
        lo, hi = span_of(p.pid, "libleakguard-agent.so")
        v = read_word(p.pid, slot)
        if lo is None or not lo <= v < hi:
            fail("patched slot %#x is not in the agent [%s, %s)" % (v, lo, hi))
        cli.send_signal(signal.SIGINT)  # Ctrl-C: detach and report
        out, err = cli.communicate(timeout=60)
        if cli.returncode != 0:
            fail("attach after Ctrl-C: rc %d %s" % (cli.returncode, err))
        wait_for(lambda: read_word(p.pid, slot) == real, "the slot to be restored")
        if p.poll() is not None:
            fail("the target died")
    finally:
        stop(p)
    print("ok: GOT slot patched into the agent, restored after Ctrl-C")


def case_other_user():
    """A process of another user (nobody) attached by root: the build tree may be closed to
    that user (CI's checkout lies in a 0700 mktemp directory), so the agent is loaded from
    a copy in the target's /tmp, and the collector's directory and socket are handed to
    that user; the planted leak is found and the target runs on."""
    d = tempfile.mkdtemp(prefix="lgattach-user-")
    os.chmod(d, 0o777)
    try:
        exe = shutil.copy(A.target, d)
        os.chmod(exe, 0o755)
        prog = os.path.join(d, "prog")

        def as_nobody():
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        p = subprocess.Popen([exe, prog], preexec_fn=as_nobody)
        try:
            wait_for(lambda: progress(prog) is not None, "the target's first progress line")
            r = attach(p.pid, os.path.join(TMP, "user.db"), 3)
            if r.returncode != 0:
                fail("rc %d %s" % (r.returncode, r.stderr))
            agents = {ln.split()[-1] for ln in maps(p.pid) if "libleakguard-agent" in ln}
            if agents != {"/tmp/libleakguard-agent-%d.so" % os.getuid()}:
                fail("the agent was loaded from %s, not from the copy in /tmp" % agents)
            funcs = leak_funcs(report(os.path.join(TMP, "user.db")))
            if not funcs or funcs[0] != "leak_here":
                fail("leaks %s, not leak_here first:\n%s" % (funcs, r.stdout))
            runs_on(p, prog)
        finally:
            stop(p)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("ok: nobody's process attached by root, leak_here at rank 1, the agent from its /tmp")


def case_loaders():
    """Three threads dlopen and dlclose in a loop, nothing else allocates but the main
    thread's progress line: quick attach/detach cycles, one right after the other. The
    injector must not load the agent from a malloc the loader makes half way through a
    dlopen (a nested dlopen crashed _dl_find_object_update), the agent must not patch an
    object ld.so is still relocating (putting its RELRO page back to read-only crashed
    elf_machine_rela), and an attach right after a detach must wait for the last
    watcher rather than take its socket (the second attach then refused: "another
    leakguard attach is recording"). Before those fixes the target died within a few
    cycles."""
    p, prog = start_target("loaders", env=dict(BUSY, ATTACH_LOADERS_ONLY="1"))
    try:
        for i in range(max(6, A.cycles * 3)):
            last = progress_now(prog)
            r = attach(p.pid, os.path.join(TMP, "l%d.db" % i), 0.3, ["-q"])
            if p.poll() is not None:
                fail("cycle %d: the target died (status %s); attach said: %s" % (i, p.returncode, r.stderr))
            if r.returncode != 0:
                fail("cycle %d: rc %d: %s" % (i, r.returncode, r.stderr))
            wait_for(lambda: (progress(prog) or 0) > last, "the loaders' progress after cycle %d" % i)
    finally:
        stop(p)
    print("ok: %d attach cycles on a target that dlopens in a loop; it runs on" % max(6, A.cycles * 3))


def case_kill_cli():
    """kill -9 of the CLI: the agent detaches itself (the slot is restored)."""
    p, prog = start_target("killcli")
    try:
        slot = base_of(p.pid, os.path.basename(A.target))[0] + got_slot_of_malloc(A.target)
        real = read_word(p.pid, slot)
        cli = subprocess.Popen([A.cli, "attach", "--duration", "60", "-o", os.path.join(TMP, "k.db"), str(p.pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # only once the injection is over (docs/attach.md: a SIGKILL of the CLI in the
        # middle of it kills the target)
        line = cli.stderr.readline()
        if "attached to process" not in line:
            fail("no attach line: %r" % line)
        wait_for(lambda: read_word(p.pid, slot) != real, "the slot to be patched")
        cli.kill()
        cli.wait()
        wait_for(lambda: read_word(p.pid, slot) == real, "the agent to restore the slot after kill -9 of the CLI")
        last = progress_now(prog)
        wait_for(lambda: (progress(prog) or 0) > last, "progress after the CLI died")
        # and it attaches again
        r = attach(p.pid, os.path.join(TMP, "k2.db"), 0.3, ["-q"])
        if r.returncode != 0:
            fail("attach after kill -9: rc %d %s" % (r.returncode, r.stderr))
    finally:
        stop(p)
    print("ok: the agent detached itself after kill -9 of the CLI")


def case_fork():
    """fork while attached: children (pass-through) exit 0, the parent is recorded."""
    p, prog = start_target("fork", env=dict(BUSY, ATTACH_FORK="1"))
    try:
        db = os.path.join(TMP, "fork.db")
        t0 = time.monotonic()
        r = attach(p.pid, db, 3)
        took = time.monotonic() - t0
        if r.returncode != 0:
            fail("rc %d %s" % (r.returncode, r.stderr))
        time.sleep(0.3)
        # first what ended early: a target gone ends the recording at once (CI saw the
        # attach return after 0.75 s with an empty report)
        if p.poll() is not None:
            fail("the target died (status %d) %.2f s into a 3-s attach: %s" % (p.returncode, took, r.stderr))
        if os.path.exists(prog + ".forkfail"):
            with open(prog + ".forkfail") as f:
                fail("a fork child failed: " + f.read())
        if "ended" in r.stderr:
            fail("the recording ended early (%.2f s): %s" % (took, r.stderr))
        funcs = leak_funcs(report(db))
        if not funcs or funcs[0] != "leak_here":
            fail("rank 1 is not leak_here: %s (attach took %.2f s; stderr: %s)" % (funcs, took, r.stderr))
    finally:
        stop(p)
    print("ok: fork children ran through, the leak found")


def attach_then_go(p, prog, name, trigger=".go", duration=3):
    """Attaches for DURATION s, and once attached tells the target to go on (the file
    PROG.go starts its work, PROG.free frees its old blocks): the report's text and the
    database."""
    db = os.path.join(TMP, name + ".db")
    cli = subprocess.Popen([A.cli, "attach", "--duration", str(duration), "-o", db, str(p.pid)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = cli.stderr.readline()
    if "attached to process" not in line:
        fail("no attach line: %r" % line)
    with open(prog + trigger, "w"):
        pass
    out, err = cli.communicate(timeout=90)
    if cli.returncode != 0:
        fail("rc %d %s" % (cli.returncode, err))
    return out, db


def case_dlopen_lib():
    """A leaking library dlopened after attach is recorded (its leak among the leaks)."""
    p, prog = start_target("dl", env={"ATTACH_LEAKY": A.leaky})
    try:
        out, db = attach_then_go(p, prog, "dl")
        funcs = leak_funcs(report(db))
        if "leaky" not in funcs:
            fail("the dlopened library's leak is not reported: %s\n%s" % (funcs, out))
    finally:
        stop(p)
    print("ok: the library dlopened after attach is recorded: %s" % funcs)


def case_mmap():
    """Anonymous mmap after attach: a mapping leaked from mmap_leak_here is a leak (space
    mmap); one mapped, grown with mremap and unmapped each time (mmap_churn) is not."""
    p, prog = start_target("mm", env={"ATTACH_MMAP": "1"})
    try:
        # 5 s, not 3: a 3-s recording once missed this leak in the sanitizer build run
        # beside other tests
        out, db = attach_then_go(p, prog, "mm", duration=5)
        d = report(db)
        funcs = leak_funcs(d)
        sus = [s for s in d["suspects"] if s["site"]["function"] == "mmap_leak_here"]
        if "mmap_leak_here" not in funcs or not sus or sus[0].get("space") != "mmap":
            fail("the mmap leak is not reported as one (space mmap): %s %s\n%s" %
                 (funcs, [(s["site"]["function"], s.get("space")) for s in d["suspects"]], out))
        if "mmap_churn" in funcs:
            fail("mapped and unmapped memory reported as a leak: %s" % funcs)
        # the same process attached again with --no-mmap: the heap's leak alone
        r = attach(p.pid, os.path.join(TMP, "mm2.db"), 3, extra=["--no-mmap"], until_flag=True)
        if r.returncode != 0:
            fail("--no-mmap: rc %d %s" % (r.returncode, r.stderr))
        funcs2 = leak_funcs(report(os.path.join(TMP, "mm2.db")))
        if "mmap_leak_here" in funcs2 or "leak_here" not in funcs2:
            fail("--no-mmap: leaks %s" % funcs2)
    finally:
        stop(p)
    print("ok: anonymous mmap after attach: %s; with --no-mmap: %s" % (funcs, funcs2))


def case_preattach():
    """100 MB allocated before attach and freed while attached: no leak but leak_here,
    no negative growth, and the bytes counted as pre-attach bytes released. 16 blocks of
    64 KiB from before the attach grown to 256 KiB by realloc while attached: each new
    block recorded at the realloc's call site (regrow_here), its old 64 KiB released."""
    p, prog = start_target("pre", ["100"])
    try:
        out, db = attach_then_go(p, prog, "pre", trigger=".free", duration=3.5)
        m = re.search(r"Pre-attach bytes released while attached: (\d+)", out)
        if not m or int(m.group(1)) < (100 << 20) + 16 * (64 << 10):
            fail("pre-attach bytes released missing or < 100 MiB + 16 x 64 KiB:\n" + out)
        d = report(db)
        funcs = leak_funcs(d)
        if funcs != ["leak_here"]:
            fail("leaks are %s, expected only leak_here" % funcs)
        grown = [s for s in d["largest_non_leaking"] if s["site"]["function"] == "regrow_here"]
        if len(grown) != 1 or grown[0]["live_blocks"] != 16 or grown[0]["live_bytes"] != 16 * (256 << 10):
            fail("regrow_here: expected 16 live blocks of 256 KiB, got %s" %
                 [(s["live_blocks"], s["live_bytes"]) for s in grown])
    finally:
        stop(p)
    print("ok: 100 MiB freed after attach: %s bytes pre-attach released, only leak_here; "
          "16 old blocks grown by realloc recorded at regrow_here" % m.group(1))


def case_errors():
    """One line each, rc 126, nothing changed in the target."""
    def one(pid, want, user=None, cli=None, wrap=None):
        r = attach(pid, os.path.join(TMP, "err.db"), 1, user=user, cli=cli, wrap=wrap)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        if r.returncode != 126 or len(lines) != 1 or want not in lines[0]:
            fail("pid %d: expected rc 126 and one line with %r, got rc %d: %r" % (pid, want, r.returncode, r.stderr))

    one(2**22 + 12345, "no process")
    if A.static:
        s = subprocess.Popen([A.static], stdin=subprocess.PIPE)
        try:
            wait_for(lambda: os.path.exists("/proc/%d/exe" % s.pid), "the static program")
            time.sleep(0.1)
            one(s.pid, "statically linked")
        finally:
            s.kill()
            s.wait()
    # another user's process, attached without CAP_SYS_PTRACE (as nobody): its memory
    # map is closed to us as ptrace is (it once read as "statically linked")
    if os.getuid() == 0:
        # a copy of the CLI that nobody can run wherever the build tree lies (/root is 0700)
        bindir = tempfile.mkdtemp(prefix="lgattach-nobody-")
        os.chmod(bindir, 0o755)
        cli = shutil.copy(A.cli, bindir)
        os.chmod(cli, 0o755)
        p, prog = start_target("other_user")
        try:
            one(p.pid, "belongs to another user", user=65534, cli=cli)
            if any(l.endswith("libleakguard-agent.so") for l in maps(p.pid)):
                fail("the agent was loaded into another user's process")
        finally:
            stop(p)
            shutil.rmtree(bindir, ignore_errors=True)
    # a process that is not dumpable, attached without CAP_SYS_PTRACE (setpriv drops it):
    # its /proc/PID/root is closed to us as ptrace is (it read as "agent not reachable");
    # then the same under Yama's ptrace_scope 1, emulated for the CLI alone (no Yama on
    # these machines): a mount namespace with a tmpfs over /proc/sys/kernel holding
    # yama/ptrace_scope, the refusal itself the kernel's
    if os.getuid() == 0 and shutil.which("setpriv") and shutil.which("unshare"):
        nd = subprocess.Popen([sys.executable, "-c", "import ctypes, sys, time\n"
                               "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0\n"
                               "print('ready', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
        try:
            nd.stdout.readline()
            nocap = ["setpriv", "--bounding-set", "-sys_ptrace"]
            one(nd.pid, "is not dumpable (needs CAP_SYS_PTRACE)", wrap=lambda c: nocap + c)
            yama = ("mount -t tmpfs lgyama /proc/sys/kernel && mkdir /proc/sys/kernel/yama && "
                    "echo 1 > /proc/sys/kernel/yama/ptrace_scope && exec ")
            one(nd.pid, "kernel.yama.ptrace_scope is 1 (only a parent may trace)",
                wrap=lambda c: ["unshare", "-m", "sh", "-c", yama + " ".join(shlex.quote(x) for x in nocap + c)])
            if any(l.endswith("libleakguard-agent.so") for l in maps(nd.pid)):
                fail("the agent was loaded into a process that is not dumpable")
        finally:
            stop(nd)
    # already traced: this test seizes it
    p, prog = start_target("traced")
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        if libc.ptrace(0x4206, p.pid, None, None) != 0:  # PTRACE_SEIZE
            fail("cannot seize the target: errno %d" % ctypes.get_errno())
        one(p.pid, "already traced")
        libc.ptrace(17, p.pid, None, None)  # PTRACE_DETACH (needs a stop; killed below anyway)
        if any(l.endswith("libleakguard-agent.so") for l in maps(p.pid)):
            fail("the agent was loaded into a traced target")
    finally:
        stop(p)
    # already recorded by `leakguard run`
    run = subprocess.Popen([A.cli, "run", "-q", "-o", os.path.join(TMP, "run.db"), "--", A.target,
                            os.path.join(TMP, "runprog")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: progress(os.path.join(TMP, "runprog")) is not None, "the program under run")
        with open(os.path.join(TMP, "runprog")) as f:
            tpid = int(f.read().split()[0])
        one(tpid, "already recorded by leakguard run")
        os.kill(tpid, signal.SIGKILL)
    finally:
        run.wait(timeout=60)
    print("ok: no process, static, another user's, not dumpable without CAP_SYS_PTRACE, Yama ptrace_scope 1, "
          "already traced, already recorded: one line each")


def case_idle():
    """A program that waits in read() and nanosleep and never allocates until told: the
    agent is loaded in a waiting thread, the leak that follows is found, and the
    interrupted calls go on (every line written is read)."""
    prog = os.path.join(TMP, "idle")
    p = subprocess.Popen([A.idle, prog], stdin=subprocess.PIPE)
    try:
        wait_for(lambda: os.path.exists(prog), "the idle program's first line")
        wait_for(lambda: all_asleep(p.pid), "the idle program's threads asleep")
        db = os.path.join(TMP, "idle.db")
        cli = subprocess.Popen([A.cli, "attach", "--duration", "8", "-o", db, str(p.pid)],
                               stderr=subprocess.PIPE, text=True)
        wait_for(lambda: any(l.endswith("libleakguard-agent.so") for l in maps(p.pid)),
                 "the agent in the idle program", timeout=30)
        sent = 0
        while cli.poll() is None and sent < 400:  # 1 MiB every 0.25 s until the recording ends
            p.stdin.write(b"leak 16\n")
            p.stdin.flush()
            sent += 1
            time.sleep(0.25)
        _, err = cli.communicate(timeout=60)
        if cli.returncode != 0:
            fail("attach to the idle program: rc %d %s" % (cli.returncode, err))
        if "idle: loaded in a waiting thread" not in err:
            fail("the attach did not say it loaded in a waiting thread: %r" % err)
        funcs = leak_funcs(report(db))
        if not funcs or funcs[0] != "leak_idle":
            fail("the idle program's leak is not rank 1: %r" % funcs)
        p.stdin.write(b"quit\n")
        p.stdin.flush()
        rc = p.wait(timeout=30)
        with open(prog) as f:
            lines, sleeps = (int(x) for x in f.read().split())
        if rc != 0 or lines != sent + 1:
            fail("the idle program after the attach: rc %d, %d lines read of %d" % (rc, lines, sent + 1))
        if sleeps < 10:
            fail("the sleeping thread stopped sleeping: %d sleeps" % sleeps)
        print("ok: idle program attached in a waiting thread; leak_idle rank 1; %d of %d lines read; "
              "%d sleeps" % (lines, sent + 1, sleeps))
    finally:
        stop(p)


def scrape(port):
    import urllib.request

    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""


def case_metrics():
    """--metrics on attach: while attached, the endpoint serves the target's live bytes
    and its growing site (leak_here, with the target's pid); after the duration the CLI
    exits 0 and the target runs on. A bad --metrics or --guard-config: rc 2, one line,
    and nothing loaded into the target."""
    p, prog = start_target("metrics")
    try:
        for extra, want in ((["--metrics", "127.0.0.1:notaport"], "--metrics"),
                            (["--guard-config", os.path.join(TMP, "missing.ini")], "--guard")):
            r = attach(p.pid, os.path.join(TMP, "bad.db"), 1, extra)
            lines = [line for line in r.stderr.splitlines() if line.strip()]
            if r.returncode != 2 or len(lines) != 1 or want not in lines[0]:
                fail("%s: expected rc 2 and one line naming %s, got rc %d: %r" % (extra, want, r.returncode, r.stderr))
        if any(line.endswith("libleakguard-agent.so") for line in maps(p.pid)):
            fail("the agent was loaded although the options were refused")
        port = free_port()
        db = os.path.join(TMP, "m.db")
        cli = subprocess.Popen([A.cli, "attach", "--duration", "8", "-q", "-o", db, "--metrics",
                                "127.0.0.1:%d" % port, str(p.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        pat = re.compile(r'^leakguard_site_live_bytes\{site="leak_here[^"]*",pid="%d"\} (\d+)' % p.pid, re.M)
        text = wait_for(lambda: (lambda t: t if pat.search(t) else None)(scrape(port)),
                        "leak_here of pid %d on the metrics endpoint" % p.pid, timeout=60)
        live = re.search(r'^leakguard_live_bytes\{space="host"[^}]*\} (\d+)', text, re.M)
        if not live or int(live.group(1)) <= 0 or int(pat.search(text).group(1)) <= 0:
            fail("no live host bytes or an empty leak_here on the endpoint:\n" + text[:2000])
        out, err = cli.communicate(timeout=90)
        if cli.returncode != 0:
            fail("attach --metrics: rc %d %s" % (cli.returncode, err))
        runs_on(p, prog)
    finally:
        stop(p)
    print("ok: leak_here of pid %d on the endpoint while attached; bad options refused" % p.pid)


def case_guard():
    """--guard on attach watches the attached process alone: a [guard] limit the target
    is over at once, warn only (no trend levels), actions log and publish. The event
    log (stderr) must show the pid watched, the level warn from the `pids` source, and
    the level published into exactly one region (the agent's in the target); no other
    source, no kill; the target runs on after detach."""
    p, prog = start_target("guard")
    try:
        ini = os.path.join(TMP, "guard.ini")
        with open(ini, "w") as f:
            f.write("[guard]\nlimit = 64M\ninterval = 100ms\n[levels]\nwarn = 2%\nhysteresis = 1%\n"
                    "breaker = 0\nemergency = 0\nhorizon_warn = 0\nhorizon_breaker = 0\nhorizon_emergency = 0\n"
                    "psi_warn = 0\npsi_breaker = 0\n[warn]\nactions = log, publish\n")
        r = attach(p.pid, os.path.join(TMP, "g.db"), 4, ["-q", "--guard", "--guard-config", ini])
        if r.returncode != 0:
            fail("attach --guard: rc %d %s" % (r.returncode, r.stderr[-2000:]))
        ev = []
        for line in r.stderr.splitlines():
            if line.startswith("{"):
                try:
                    ev.append(json.loads(line))
                except ValueError:
                    fail("not a JSON event line: %r" % line)
        watched = [e for e in ev if e.get("event") in ("watch", "watch_pid")]
        if [e.get("source") or e.get("pid") for e in watched] != ["pids", p.pid]:
            fail("the guard should watch the target alone, got %r" % watched)
        lv = [e for e in ev if e.get("event") == "level"]
        if not lv or lv[0].get("to") != "warn" or lv[0].get("source") != "pids":
            fail("no level warn from the attached process: %r" % lv)
        pub = [e for e in ev if e.get("event") == "action" and e.get("action") == "publish"]
        if not pub or pub[0].get("published_level") != "warn" or pub[0].get("regions") != 1:
            fail("the warn level not published into the target's region alone: %r" % pub)
        if any(e.get("action") in ("kill", "signal", "sigkill") for e in ev):
            fail("an action beyond log and publish: %r" % ev)
        runs_on(p, prog)
    finally:
        stop(p)
    print("ok: the guard watched pid %d alone, went to warn and published into its region" % p.pid)


def futex_prog(tag, wake, *extra):
    out = os.path.join(TMP, tag)
    p = subprocess.Popen([A.futex, out, str(wake)] + list(extra))
    wait_for(lambda: os.path.exists(out), "the futex program's first line")
    wait_for(lambda: all_asleep(p.pid), "the futex program's threads asleep")
    return p, out


def case_futex():
    """A program whose threads all wait in futex (a condition variable with a timeout, a
    semaphore, pthread_join): the agent is loaded in one of them, chosen by its call
    stack; the leak after the wake is rank 1; the timed wait (interrupted by the
    injector, then restarted) ends, not before its time, and the others go on."""
    wake = 8
    p, out = futex_prog("futex", wake)
    try:
        db = os.path.join(TMP, "futex.db")
        r = attach(p.pid, db, 12)
        if r.returncode != 0:
            fail("attach to the futex program: rc %d %s" % (r.returncode, r.stderr))
        if "idle: loaded in a waiting thread" not in r.stderr:
            fail("the attach did not say it loaded in a waiting thread: %r" % r.stderr)
        funcs = leak_funcs(report(db))
        if not funcs or funcs[0] != "leak_futex":
            fail("the futex program's leak is not rank 1: %r" % funcs)
        rc = p.wait(timeout=30)
        with open(out) as f:
            w = f.read().split()
        waited = float(w[1]) if len(w) == 2 and w[0] == "waited" else -1
        if rc != 0 or waited < wake:
            fail("the futex program after the attach: rc %d, %r (want a wait of %d s)" % (rc, w, wake))
        print("ok: all-futex program attached in a waiting thread; leak_futex rank 1; the timed wait "
              "lasted %.3f s of %d" % (waited, wake))
    finally:
        stop(p)


def case_futex_loader():
    """The one thread waits in futex inside a dl_iterate_phdr callback (holding the
    loader's lock): its stack says so, the attach is refused in one line, nothing is
    loaded, and the program goes on."""
    wake = 5
    p, out = futex_prog("futex_loader", wake, "loader")
    try:
        r = attach(p.pid, os.path.join(TMP, "futex_loader.db"), 2)
        err = r.stderr.strip()
        if r.returncode == 0 or "none of its threads waits in a system call that can be interrupted safely" not in err \
                or len(err.splitlines()) != 1:
            fail("attach to a thread holding the loader's lock: rc %d %r" % (r.returncode, err))
        if any(l.endswith("libleakguard-agent.so") for l in maps(p.pid)):
            fail("the agent was loaded into the program")
        rc = p.wait(timeout=30)
        with open(out) as f:
            w = f.read().split()
        if rc != 0 or len(w) != 2 or float(w[1]) < wake:
            fail("the program after the refused attach: rc %d, %r" % (rc, w))
        print("ok: a futex wait inside dl_iterate_phdr refused (%s); the program went on" % err)
    finally:
        stop(p)


def main():
    global A, TMP
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--cli", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--leaky")
    ap.add_argument("--static")
    ap.add_argument("--idle")
    ap.add_argument("--futex")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the Python targets")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (databases)")
    A = ap.parse_args()
    attach_common.A = attach_py.A = A
    if A.keep or os.environ.get("LG_ATTACH_KEEP"):
        TMP = tempfile.mkdtemp(prefix="lg-attach-")
        attach_common.TMP = attach_py.TMP = TMP
        print("keeping %s" % TMP)
        globals()["case_" + A.case]()
        return
    with tempfile.TemporaryDirectory(prefix="lg-attach-") as d:
        TMP = d
        attach_common.TMP = attach_py.TMP = d
        globals()["case_" + A.case]()


if __name__ == "__main__":
    main()
