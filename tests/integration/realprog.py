#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Real programs nobody here wrote, under their own load generators (issue #10: no false
alarms on real programs, and their real growth found).

  --program http          Debian's python3 -m http.server under wrk for --seconds:
                          healthy (CPython's type attribute cache fills while it serves)
  --program redis         redis-server (linked with jemalloc) under redis-benchmark with
                          a bounded keyspace (20 000 random keys): healthy
  --program redis-grow    the same with keys drawn from 10^8: every SET adds a key that
                          is never read or deleted, the keyspace grows without bound (a
                          cache whose keys never match): a leak in redis's own dict

  --expect leak|no-leak   the verdict; for a leak, the rank-1 site's function is one of
                          --function (repeatable) and nothing is reported in the mmap space
  --hog N                 N busy processes share the CPUs for the whole run

Each run also checks that the load generator really served requests (at least
--min-requests), so a server that never answered cannot pass as healthy.
--fixture NAME judges a recorded run instead (tests/fixtures/fixture.py).
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import detect  # noqa: E402  (start_hogs)
import lgtest  # noqa: E402
import fixture  # noqa: E402  (tests/fixtures, on the path through lgtest)


def extra(ap):
    ap.add_argument("--program", choices=("http", "redis", "redis-grow"), required=True)
    ap.add_argument("--expect", choices=("leak", "no-leak"), required=True)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--function", action="append", default=[])
    ap.add_argument("--hog", type=int, default=0)
    ap.add_argument("--min-requests", type=int, default=500)


def wait_port(port, proc, seconds=60):
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.2)
    return False


def tool(t, name):
    for d in ("/usr/bin", "/usr/local/bin"):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    t.fatal("%s installed (scripts/deps.sh installs it)" % name)


def run_live(t, args):
    """The server under `leakguard run` and its load generator; the run's result, with
    extra["served"] the requests it served."""
    port = lgtest.free_port()
    db = t.path("run.db")
    if args.program == "http":
        www = t.path("www")
        os.mkdir(www)
        with open(os.path.join(www, "index.html"), "w") as f:
            f.write("<html><body>%s</body></html>\n" % ("leakguard " * 200))
        target = ["/usr/bin/python3", "-m", "http.server", str(port), "--bind", "127.0.0.1",
                  "--directory", www]
        load = [tool(t, "wrk"), "-t2", "-c16", "-d%ds" % args.seconds, "http://127.0.0.1:%d/" % port]
    else:
        target = [tool(t, "redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no", "--daemonize", "no"]
        keys = "20000" if args.program == "redis" else "100000000"
        tests = "set,get,incr,lpush,lpop,sadd,hset" if args.program == "redis" else "set"
        load = [tool(t, "redis-benchmark"), "-p", str(port), "-q", "-t", tests, "-r", keys,
                "-c", "20", "-n", "1000000"]
    argv = [args.leakguard, "run", "--quiet", "--output", db, "--"] + target
    print("  $ %s" % " ".join(argv), flush=True)
    hogs = detect.start_hogs(args.hog)
    served = 0
    try:
        lg = subprocess.Popen(argv, cwd=t.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if not wait_port(port, lg):
            lg.kill()
            out, err = lg.communicate()
            t.fatal("the server listens on port %d" % port, stderr=err[-3000:])
        print("  $ %s" % " ".join(load), flush=True)
        if args.program == "http":
            r = subprocess.run(load, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=args.seconds + 60)
            m = re.search(r"(\d+) requests in", r.stdout)
            served = int(m.group(1)) if m else 0
            print("    " + "\n    ".join(r.stdout.strip().splitlines()[-6:]), flush=True)
        else:
            # redis-benchmark has no duration option: run it for --seconds, then stop it
            b = subprocess.Popen(load, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(args.seconds)
            b.send_signal(signal.SIGINT)
            try:
                out, _ = b.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                b.kill()
                out, _ = b.communicate()
            info = subprocess.run([tool(t, "redis-cli"), "-p", str(port), "info", "stats"],
                                  stdout=subprocess.PIPE, text=True, timeout=30).stdout
            m = re.search(r"total_commands_processed:(\d+)", info)
            served = int(m.group(1)) if m else 0
            keys_now = subprocess.run([tool(t, "redis-cli"), "-p", str(port), "dbsize"],
                                      stdout=subprocess.PIPE, text=True, timeout=30).stdout.strip()
            print("    commands processed: %d, keys: %s" % (served, keys_now), flush=True)
        time.sleep(1)
        lg.send_signal(signal.SIGTERM)  # `leakguard run` passes it on to the server
        try:
            out, err = lg.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            lg.kill()
            out, err = lg.communicate()
            t.fatal("leakguard run ends after the server's SIGTERM", stderr=err[-3000:])
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return fixture.Result(lg.returncode, out, err, None, db, dict(served=served))


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("realprog-%s%s" % (args.program, "-hog" if args.hog else ""), args)
    r = t.fx.run("run", lambda: run_live(t, args))
    served, db = r.extra.get("served", 0), r.db
    t.check(served >= args.min_requests, "the load generator was served (%d requests)" % served,
            served=served)
    if t.live:
        t.check(r.returncode in (0, 128 + signal.SIGTERM), "leakguard run exits with the server's status",
                exit=r.returncode, stderr=r.stderr[-2000:])
    rep = t.report_json(db)
    leaks = rep.get("leaks") or []
    sus = rep.get("suspects") or []
    if not t.live:  # a recorded run: every format renders it
        t.check_formats(db, ((sus[0].get("site") or {}).get("function") if sus else None))
    t.check(rep.get("verdict") == args.expect, "verdict %s" % args.expect, verdict=rep.get("verdict"),
            leaks=[(x.get("site"), x.get("pattern")) for x in sus][:5],
            minor=[(m.get("site"), m.get("growth_bytes")) for m in rep.get("minor_growth") or []][:5])
    t.check(not [s for s in sus if s.get("space") == "mmap"], "no suspect in the mmap space (the allocator's own arenas)",
            mmap=[(s.get("site"), s.get("live_bytes")) for s in sus if s.get("space") == "mmap"])
    if args.expect == "leak":
        fn = ((sus[0].get("site") or {}).get("function") if sus else None) or ""
        t.check(bool(leaks) and any(fn == f for f in args.function),
                "rank 1 is one of %s" % "/".join(args.function), rank1=fn, leaks=len(leaks))
    else:
        t.check(not leaks, "no leak entries", leaks=leaks[:3])
    t.finish()


if __name__ == "__main__":
    main()
