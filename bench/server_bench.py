#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Real servers under load, bare against recorded (issue #32). Not a test.

  bench/server_bench.py [--build DIR] [--lg DIR] [--reps 3] [--seconds 5] [--servers py,cxx]
                        [--modes bare,full,sampled] [--conns 4]

Servers: `py` is bench/py_webapp.py (stdlib http.server JSON app, /usr/bin/python3),
`cxx` is build/bench/cxx_router (an allocation-heavy C++ router, shared_ptr, maps,
ostringstream). Each is started bare, under `leakguard run` in full mode, and sampled
(-s 512K), interleaved (round 1 of every mode, then round 2, ...), loaded with
`wrk -t1 -cCONNS` for SECONDS after a one-second warm-up, and stopped. Prints, per server
and mode, the median requests/s, its ratio to bare, and the CPU seconds the collector
(the leakguard process) and the server used during the measured window; and the load
average. Needs wrk (Debian package).
"""
import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    """utime + stime of pid and its reaped children so far, in seconds (0 if gone)."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / TICK


def wait_port(port, proc, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"server_bench: the server exited early ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"server_bench: nothing listens on {port} after {timeout} s")


def server_pid(proc, exe_hint):
    """The server's pid: proc itself (bare) or leakguard's child running it."""
    try:
        kids = open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()
    except OSError:
        kids = []
    for k in kids:
        try:
            if exe_hint in open(f"/proc/{k}/cmdline").read():
                return int(k)
        except OSError:
            pass
    return proc.pid


def run_once(args, server, mode, port, tmp):
    if server == "py":
        cmd, hint = ["/usr/bin/python3", os.path.join(ROOT, "bench", "py_webapp.py"), str(port)], "py_webapp"
        url = f"http://127.0.0.1:{port}/items?n=16&q=abc"
    else:
        cmd, hint = [os.path.join(args.build, "bench", "cxx_router"), "--port", str(port)], "cxx_router"
        url = f"http://127.0.0.1:{port}/items?n=16&q=abc"
    mode, _, lgdir = mode.partition("@")
    lgdir = lgdir or args.lg
    if mode != "bare":
        lg = [os.path.join(lgdir, "bin", "leakguard"), "run", "-q", "--force", "-o", os.path.join(tmp, "s.db")]
        if mode == "sampled":
            lg += ["-s", "512K"]
        cmd = lg + ["--"] + cmd
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_port(port, proc)
        subprocess.run(["wrk", "-t1", f"-c{args.conns}", "-d1s", url], capture_output=True, check=True)
        spid = server_pid(proc, hint)
        c0, s0 = (cpu_s(proc.pid) if mode != "bare" else 0.0), cpu_s(spid)
        out = subprocess.run(["wrk", "-t1", f"-c{args.conns}", f"-d{args.seconds}s", url], capture_output=True,
                             text=True, check=True).stdout
        c1, s1 = (cpu_s(proc.pid) if mode != "bare" else 0.0), cpu_s(spid)
        m = re.search(r"Requests/sec:\s*([0-9.]+)", out)
        if not m or "Non-2xx" in out:
            sys.exit(f"server_bench: wrk against {server}/{mode}: {out}")
        return float(m.group(1)), c1 - c0, s1 - s0
    finally:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--lg", help="the build whose leakguard and libleakguard.so to measure (default: --build); "
                    "the benchmark programs still come from --build; a mode written MODE@DIR uses DIR's")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--servers", default="py,cxx")
    ap.add_argument("--modes", default="bare,full,sampled")
    ap.add_argument("--conns", type=int, default=4)
    args = ap.parse_args()
    args.lg = args.lg or args.build
    if not shutil.which("wrk"):
        sys.exit("server_bench: wrk is missing (apt-get install wrk)")
    modes = args.modes.split(",")
    if "bare" not in modes:
        modes.insert(0, "bare")
    load0 = os.getloadavg()[0]
    rows = []
    port = 18090
    with tempfile.TemporaryDirectory() as tmp:
        for server in args.servers.split(","):
            res = {m: [] for m in modes}
            for _ in range(args.reps):
                for m in modes:
                    port += 1
                    res[m].append(run_once(args, server, m, port, tmp))
                    print(f"# {server} {m}: {res[m][-1][0]:.0f} req/s", file=sys.stderr, flush=True)
            med = {m: statistics.median(r[0] for r in v) for m, v in res.items()}
            coll = {m: statistics.median(r[1] for r in v) for m, v in res.items()}
            srv = {m: statistics.median(r[2] for r in v) for m, v in res.items()}
            rows.append((server, med, coll, srv, [r[0] for r in res["bare"]], os.getloadavg()[0]))
    print(f"server_bench: wrk -t1 -c{args.conns}, {args.seconds} s per run after 1 s of warm-up, median of "
          f"{args.reps} interleaved runs; load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the "
          f"end, {os.cpu_count()} CPUs\n")
    print("| server | bare req/s | " + " | ".join(f"{m}: req/s (ratio), server / collector CPU s" for m in modes[1:])
          + " | load |")
    print("|" + "---|" * (3 + len(modes)))
    for server, med, coll, srv, bare_runs, load in rows:
        cells = " | ".join(f"{med[m]:.0f} ({med[m] / med['bare']:.2f}), {srv[m]:.1f} / {coll[m]:.1f}"
                           for m in modes[1:])
        print(f"| {server} | {med['bare']:.0f} | {cells} | {load:.1f} |")


if __name__ == "__main__":
    main()
