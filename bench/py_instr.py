# SPDX-License-Identifier: MIT
"""The recorder's cost on Python, counted in instructions (issue #32): callgrind counts
the target's own instructions, which do not depend on the load of the machine, so this
benchmark can run beside anything (wall-clock ratios: bench/server_bench.py,
bench/python_bench.sh, on a quiet machine). Not a test.

  python3 bench/py_instr.py [--modes bare,full,sampled] [--lg NAME=BUILD ...]
                            [--rounds 3] [--requests 100,600] [--only loop|web]

Two workloads, each measured as the difference of two runs so that start-up, imports
and exit drop out:
  loop  bench/py_alloc.py with LG_ALLOC_ROUNDS=R and 0: the loop's instructions;
  web   bench/py_webapp.py serving A and B requests (`/items?n=40`, one keep-alive
        connection, http.client): instructions per request over B-A.
Modes: bare (no leakguard), full, sampled (`-s 512K`); `full@NAME`, `sampled@NAME` use the
leakguard of another build (--lg NAME=path/to/build, e.g. a checkout of the commit
before a change). Prints one line per workload and mode, with the ratio to bare.
"""
import argparse
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"


def prefix(mode, builds, tmp, tag):
    if mode == "bare":
        return []
    kind, _, name = mode.partition("@")
    lg = os.path.join(builds[name or "this"], "bin", "leakguard")
    cmd = [lg, "run", "-q", "--force", "-o", os.path.join(tmp, f"{tag}.db")]
    if kind == "sampled":
        cmd += ["-s", "512K"]
    elif kind != "full":
        sys.exit(f"py_instr.py: unknown mode {mode}")
    return cmd + ["--"]


def callgrind(out):
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]


def total(out):
    with open(out) as f:
        for line in f:
            m = re.match(r"(?:summary|totals): (\d+)", line)
            if m:
                return int(m.group(1))
    sys.exit(f"py_instr.py: no total in {out}")


def loop_run(mode, builds, tmp, rounds):
    out = os.path.join(tmp, f"loop-{mode}-{rounds}.cg")
    env = dict(os.environ, LG_ALLOC_ROUNDS=str(rounds))
    cmd = prefix(mode, builds, tmp, f"loop-{mode}-{rounds}") + callgrind(out) + [PY, f"{ROOT}/bench/py_alloc.py"]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return total(out)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def web_run(mode, builds, tmp, requests):
    out = os.path.join(tmp, f"web-{mode}-{requests}.cg")
    port = free_port()
    cmd = prefix(mode, builds, tmp, f"web-{mode}-{requests}") + callgrind(out) + [PY, f"{ROOT}/bench/py_webapp.py", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.connect()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"py_instr.py: the web app did not start ({mode})")
            time.sleep(0.2)
    for _ in range(requests):
        conn.request("GET", "/items?n=40&q=word")
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            sys.exit(f"py_instr.py: status {r.status}")
    conn.close()
    # SIGTERM to the server itself (valgrind runs it in the same process): callgrind
    # writes its counts as the process ends, both runs end the same way, and the
    # difference of the two leaves start-up and the end out. (SIGINT's KeyboardInterrupt
    # was not always seen by serve_forever under valgrind.)
    pid = subprocess.run(["pgrep", "-f", f"callgrind-out-file={out}"], capture_output=True, text=True).stdout.split()
    for p in pid:
        if int(p) != proc.pid or mode == "bare":
            os.kill(int(p), signal.SIGTERM)
    proc.wait(timeout=300)
    return total(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="bare,full,sampled")
    ap.add_argument("--lg", action="append", default=[], help="NAME=BUILD_DIR for mode@NAME")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", default="100,600")
    ap.add_argument("--only", choices=["loop", "web"])
    a = ap.parse_args()
    builds = {"this": a.build}
    for spec in a.lg:
        name, _, path = spec.partition("=")
        builds[name] = path
    modes = a.modes.split(",")
    ra, rb = (int(x) for x in a.requests.split(","))
    load = os.getloadavg()[0]
    print(f"# py_instr.py: {PY}, load {load:.1f} (instructions do not depend on it)")
    with tempfile.TemporaryDirectory(prefix="lg-py-instr-") as tmp:
        res = {}
        for w in ("loop", "web"):
            if a.only and a.only != w:
                continue
            for m in modes:
                if w == "loop":
                    res[w, m] = loop_run(m, builds, tmp, a.rounds) - loop_run(m, builds, tmp, 0)
                else:
                    res[w, m] = (web_run(m, builds, tmp, rb) - web_run(m, builds, tmp, ra)) / (rb - ra)
                base = res.get((w, "bare"))
                unit = f"{res[w, m] / 1e6:8.1f} M instructions in {a.rounds} rounds" if w == "loop" else \
                    f"{res[w, m] / 1e6:8.3f} M instructions per request"
                ratio = f"  {res[w, m] / base:5.2f}x bare" if base else ""
                print(f"{w:4} {m:16} {unit}{ratio}", flush=True)


if __name__ == "__main__":
    main()
