# SPDX-License-Identifier: MIT
"""Helpers for the guard's integration tests (python3 stdlib only).

A test creates a real memory cgroup with a limit (cgroup v2 when a v2 hierarchy has
the memory controller, else cgroup v1 under /sys/fs/cgroup/memory), starts its own
processes inside it, and removes everything it created at the end. It never signals a
process it did not start. Exit code SKIP (77) when cgroups cannot be created.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77


def skip(msg):
    print("SKIP: " + msg)
    sys.exit(SKIP)


def _read(path):
    with open(path) as f:
        return f.read()


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


class Cgroup:
    """A memory cgroup made for one test; use as a context manager."""

    def __init__(self, limit_bytes, want="auto"):
        self.limit = limit_bytes
        self.path = None
        self.version = None
        self.procs = []
        errors = []
        if os.geteuid() != 0:
            skip("needs root to create memory cgroups")
        if want in ("auto", "v2"):
            for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                try:
                    ctrls = _read(os.path.join(root, "cgroup.controllers")).split()
                except OSError:
                    continue
                if "memory" not in ctrls:
                    errors.append("%s: no memory controller in cgroup.controllers" % root)
                    continue
                try:
                    if "memory" not in _read(os.path.join(root, "cgroup.subtree_control")).split():
                        _write(os.path.join(root, "cgroup.subtree_control"), "+memory")
                    self.path = tempfile.mkdtemp(prefix="leakguard-test-", dir=root)
                    _write(os.path.join(self.path, "memory.max"), str(limit_bytes))
                    if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                        _write(os.path.join(self.path, "memory.swap.max"), "0")
                    self.version = 2
                    break
                except OSError as e:
                    errors.append("%s: %s" % (root, e))
                    self._rmdir()
        if self.path is None and want in ("auto", "v1"):
            root = "/sys/fs/cgroup/memory"
            try:
                self.path = tempfile.mkdtemp(prefix="leakguard-test-", dir=root)
                _write(os.path.join(self.path, "memory.limit_in_bytes"), str(limit_bytes))
                sw = os.path.join(self.path, "memory.swappiness")
                if os.path.exists(sw):
                    try:
                        _write(sw, "0")
                    except OSError:
                        pass
                self.version = 1
            except OSError as e:
                errors.append("%s: %s" % (root, e))
                self._rmdir()
        if self.path is None:
            skip("cannot create a memory cgroup: " + "; ".join(errors))

    def _rmdir(self):
        if self.path:
            try:
                os.rmdir(self.path)
            except OSError:
                pass
            self.path = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def oom_kills(self):
        if self.version == 2:
            text = _read(os.path.join(self.path, "memory.events"))
        else:
            text = _read(os.path.join(self.path, "memory.oom_control"))
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
        return 0

    def spawn(self, argv, **kw):
        """Starts argv inside the cgroup (it moves itself in before exec)."""
        procs_file = os.path.join(self.path, "cgroup.procs")

        def enter():
            with open(procs_file, "w") as f:
                f.write(str(os.getpid()))
        p = subprocess.Popen(argv, preexec_fn=enter, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, **kw)
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()
        self.procs = []

    def close(self):
        self.stop_all()
        if self.path:
            for _ in range(50):  # the kernel may take a moment to drop exited tasks
                try:
                    os.rmdir(self.path)
                    self.path = None
                    return
                except OSError:
                    time.sleep(0.1)
            print("warning: could not remove cgroup " + self.path, file=sys.stderr)


def children(ppid):
    """The pids whose parent is ppid (/proc/PID/stat), in /proc's order."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
            except OSError:
                continue
            if int(st[st.rindex(")") + 2:].split()[1]) == ppid:
                out.append(int(d))
    return out


def wait_line(p, want, timeout=10):
    """Reads p's stdout until a line starting with want."""
    end = time.time() + timeout
    while time.time() < end:
        line = p.stdout.readline()
        if not line:
            break
        if line.startswith(want):
            return line
    raise RuntimeError("no '%s' from pid %d" % (want, p.pid))


def read_events(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def wait_event(path, pred, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        for e in read_events(path):
            if pred(e):
                return e
        time.sleep(0.02)
    return None


def stop(p, timeout=10):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()
