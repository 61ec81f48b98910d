#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""End-to-end check of the Prometheus endpoint with a real Prometheus server.

1. Starts an exporter on a free loopback port: tests/deploy/metrics_fixture (the real
   exporter, lgx_serve, with known values); with --leakguard, and when
   `leakguard run --help` mentions --metrics, also `leakguard run --metrics
   127.0.0.1:PORT -- SCENARIO` on a leaking scenario program, and `leakguard guard
   --system --dry-run --metrics 127.0.0.1:PORT` when the guard command exists.
2. Writes a prometheus.yml that scrapes the endpoint(s) every 1 s and loads
   deploy/prometheus/leakguard-rules.yml, and starts `prometheus` (Debian package) on
   another free loopback port with a temporary TSDB.
3. Polls Prometheus' HTTP API (/api/v1/query) until the values arrive (30 s at most):
   leakguard_live_bytes from the fixture (>= the known start value), a labelled series
   with an escaped label value, the counters; up == 1; the rules loaded and evaluated
   with health "ok". For leakguard run: leakguard_live_bytes > 0; for the guard:
   leakguard_guard_level.
4. Bad input: a second exporter (fixture, and `leakguard guard`) on the port already
   in use fails with a message that says the port is in use.
Every process started here is killed at the end, whatever happens.

  prometheus_scrape.py --fixture BUILD/tests/metrics_fixture [--leakguard BUILD/bin/leakguard
                       --scenario BUILD/tests/scenarios/churn_leak] [--keep]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from lgtest import free_port  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RULES = os.path.join(ROOT, "deploy/prometheus/leakguard-rules.yml")
TIMEOUT = 30.0
procs = []


def log(msg):
    print("prometheus_scrape: " + msg, flush=True)


def fail(msg):
    log("FAIL: " + msg)
    raise SystemExit(1)


def start(cmd, logpath, **kw):
    f = open(logpath, "w")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, **kw)
    procs.append(p)
    return p


def stop_all():
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.time() + 5
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def http_get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_http(url, what, proc, logpath):
    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        if proc.poll() is not None:
            fail(f"{what} exited with {proc.returncode}:\n" + open(logpath).read()[-3000:])
        try:
            st, body = http_get(url)
            if st == 200:
                return body
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    fail(f"{what} did not answer at {url} within {TIMEOUT:.0f} s:\n" + open(logpath).read()[-3000:])


def query(prom, q):
    st, body = http_get(f"http://{prom}/api/v1/query?" + urllib.parse.urlencode({"query": q}))
    d = json.loads(body)
    if d.get("status") != "success":
        fail(f"query {q!r}: {body[:500]}")
    return d["data"]["result"]


def wait_query(prom, q, check, what):
    """Polls until check(result) is true; returns the result."""
    deadline = time.time() + TIMEOUT
    res = None
    while time.time() < deadline:
        try:
            res = query(prom, q)
            if res and check(res):
                log(f"ok: {what}: {q} = " + ", ".join(
                    f"{json.dumps(r['metric'], sort_keys=True)} {r['value'][1]}" for r in res))
                return res
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.5)
    fail(f"{what}: {q} did not arrive within {TIMEOUT:.0f} s (last result {res})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--leakguard")
    ap.add_argument("--scenario", help="a leaking program for `leakguard run --metrics` (optional)")
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
    if not os.access(a.prometheus, os.X_OK):
        fail(f"prometheus not found ({a.prometheus}); Debian package 'prometheus' (scripts/deps.sh)")

    tmp = tempfile.mkdtemp(prefix="lg-prom-")
    try:
        # --- 1. exporters
        fport = free_port()
        fix_log = os.path.join(tmp, "fixture.log")
        fix = start([a.fixture, f"127.0.0.1:{fport}", "--seconds", "90"], fix_log)
        body = wait_http(f"http://127.0.0.1:{fport}/metrics", "metrics_fixture", fix, fix_log)
        if "# TYPE leakguard_live_bytes gauge\n" not in body:
            fail("fixture /metrics lacks leakguard_live_bytes:\n" + body)
        log(f"fixture serving on 127.0.0.1:{fport}")

        # bad input: the same port again
        r = subprocess.run([a.fixture, f"127.0.0.1:{fport}", "--seconds", "1"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=10)
        if r.returncode != 2 or "already in use" not in r.stderr:
            fail(f"second exporter on a port in use: exit {r.returncode}, stderr {r.stderr!r}")
        log("ok: port in use -> exit 2, " + r.stderr.strip())

        targets = [f"127.0.0.1:{fport}"]
        run_port = None
        if a.leakguard and a.scenario:
            h = subprocess.run([a.leakguard, "run", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=10)
            if "--metrics" in h.stdout:
                run_port = free_port()
                run_log = os.path.join(tmp, "run.log")
                run = start([a.leakguard, "run", "-o", os.path.join(tmp, "run.db"), "--metrics",
                             f"127.0.0.1:{run_port}", "--", a.scenario, "--seconds", "25"], run_log,
                            stdin=subprocess.DEVNULL)
                wait_http(f"http://127.0.0.1:{run_port}/metrics", "leakguard run --metrics", run, run_log)
                targets.append(f"127.0.0.1:{run_port}")
                log(f"leakguard run --metrics serving on 127.0.0.1:{run_port}")
            else:
                log("leakguard run has no --metrics yet: checking the fixture only")

        guard_port = None
        if a.leakguard:
            h = subprocess.run([a.leakguard, "guard", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=10)
            if h.returncode == 0 and "--metrics" in h.stdout:
                guard_port = free_port()
                glog = os.path.join(tmp, "guard.log")
                g = start([a.leakguard, "guard", "--system", "--dry-run", "--duration", "60", "--log",
                           os.path.join(tmp, "guard.jsonl"), "--metrics", f"127.0.0.1:{guard_port}"], glog,
                          stdin=subprocess.DEVNULL)
                wait_http(f"http://127.0.0.1:{guard_port}/metrics", "leakguard guard --metrics", g, glog)
                log(f"leakguard guard --metrics serving on 127.0.0.1:{guard_port}")
                # bad input through the real CLI: the same port again
                r = subprocess.run([a.leakguard, "guard", "--system", "--duration", "1", "--metrics",
                                    f"127.0.0.1:{guard_port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, timeout=10)
                if r.returncode == 0 or "already in use" not in r.stderr:
                    fail(f"leakguard guard on a port in use: exit {r.returncode}, stderr {r.stderr!r}")
                log(f"ok: leakguard guard on a port in use -> exit {r.returncode}, " + r.stderr.strip())

        # --- 2. Prometheus
        pport = free_port()
        prom = f"127.0.0.1:{pport}"
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n")
            f.write(f"rule_files:\n  - {RULES}\n")
            f.write("scrape_configs:\n")
            f.write("  - job_name: fixture\n    static_configs:\n")
            f.write(f"      - targets: ['127.0.0.1:{fport}']\n")
            if guard_port:
                f.write("  - job_name: guard\n    static_configs:\n")
                f.write(f"      - targets: ['127.0.0.1:{guard_port}']\n")
            if run_port:
                f.write("  - job_name: run\n    static_configs:\n")
                f.write(f"      - targets: ['127.0.0.1:{run_port}']\n")
        prom_log = os.path.join(tmp, "prometheus.log")
        pr = start([a.prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                    f"--web.listen-address={prom}", "--storage.tsdb.retention.time=1h",
                    f"--web.console.templates={tmp}", f"--web.console.libraries={tmp}"], prom_log)
        wait_http(f"http://{prom}/-/ready", "prometheus", pr, prom_log)
        log(f"prometheus ready on {prom}")

        # --- 3. values arrive
        wait_query(prom, 'leakguard_live_bytes{job="fixture"}', lambda r: float(r[0]["value"][1]) >= 123456789,
                   "fixture live bytes")
        wait_query(prom, 'up{job="fixture"}', lambda r: r[0]["value"][1] == "1", "scrape health")
        wait_query(prom, 'leakguard_site_live_bytes{job="fixture"}',
                   lambda r: {x["metric"].get("site"): x["value"][1] for x in r} ==
                   {"cache_put (leaky.c:28)": "3858759", "parse \"quoted\" (codec.c:7)": "65536"},
                   "labelled series with escaped label values")
        wait_query(prom, 'leakguard_guard_actions_total{job="fixture",action="warn"}',
                   lambda r: r[0]["value"][1] == "2", "counter")
        wait_query(prom, 'leakguard_gpu_memory_used_bytes{job="fixture",device="0"}',
                   lambda r: r[0]["value"][1] == "2147483648", "gpu gauge")
        wait_query(prom, 'leakguard_tag_live_bytes{job="fixture",tag="request"}',
                   lambda r: r[0]["value"][1] == "262144", "tag gauge")
        # the shipped rules loaded and evaluate on real data
        deadline = time.time() + TIMEOUT
        while True:
            st, body = http_get(f"http://{prom}/api/v1/rules")
            groups = json.loads(body)["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            if rules and all(r.get("health") == "ok" for r in rules):
                break
            if time.time() > deadline:
                fail(f"rules not loaded/evaluated ok: {body[:1500]}")
            time.sleep(0.5)
        log(f"ok: {len(rules)} alerting rules loaded, health ok")
        if guard_port:
            wait_query(prom, 'leakguard_guard_level{job="guard"}', lambda r: r[0]["value"][1] in ("0", "1", "2", "3"),
                       "leakguard guard --metrics level")
        if run_port:
            wait_query(prom, 'leakguard_live_bytes{job="run"}', lambda r: float(r[0]["value"][1]) > 0,
                       "leakguard run --metrics live bytes")
        log("PASS")
        return 0
    finally:
        stop_all()
        if a.keep:
            log("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
