#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Issue #15 item 4: the isolated calls of a recorded program on the Prometheus
endpoint of `leakguard run --metrics`. tests/isolate/iso_metrics.c makes calls of known
outcomes (3 ok, 1 each of budget, forbidden, timeout, crash, error) and waits; the
scrape must show exactly those counters by outcome, and a histogram of the children's
peak growth whose count is the 7 calls that ran a child (error runs none), with the 3
ok calls (1 MiB touched) under its 4 MiB bucket.

  iso_metrics.py --leakguard BIN --prog iso_metrics
  iso_metrics.py --leakguard BIN --pydir BUILD/python   the same calls from Python
                 (leakguard.run_isolated on /usr/bin/python3; no error call there)
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import lgtest  # noqa: E402  (free_port)

PY_CALLS = """
import os, signal, socket, sys, time
sys.path.insert(0, %r)
import leakguard as lg
def touch(n):
    b = bytearray(n)
    b[::4096] = b"\\x01" * len(b[::4096])
    return len(b)
def expect(what, fn, *a, **kw):
    try:
        lg.run_isolated(fn, *a, **kw)
        got = "ok"
    except lg.MemoryBudgetExceeded:
        got = "budget"
    except lg.IsolationViolation:
        got = "forbidden"
    except lg.IsolationTimeout:
        got = "timeout"
    except lg.IsolationCrash:
        got = "crash"
    print(got + ("" if got == what else " (unexpected)"), flush=True)
for _ in range(3):
    expect("ok", touch, 1 << 20)
expect("budget", touch, 256 << 20, max_rss="32M")
expect("forbidden", lambda: socket.socket())
expect("timeout", time.sleep, 10, timeout=0.3)
expect("crash", lambda: os.kill(os.getpid(), signal.SIGSEGV))
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.1)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--prog")
    ap.add_argument("--pydir", help="run the calls from Python (leakguard.run_isolated) instead")
    a = ap.parse_args()
    fails = []

    def check(cond, what, **kv):
        print("  %s %s" % ("ok  " if cond else "FAIL", what))
        if not cond:
            for k, v in kv.items():
                print("         %s = %s" % (k, str(v)[:3000]))
            fails.append(what)

    with tempfile.TemporaryDirectory() as d:
        done = os.path.join(d, "done")
        port = lgtest.free_port()
        if a.pydir:
            script = os.path.join(d, "calls.py")
            with open(script, "w") as f:
                f.write(PY_CALLS % a.pydir)
            target = ["/usr/bin/python3", script, done]
        else:
            target = [a.prog, done]
        p = subprocess.Popen([a.leakguard, "run", "-q", "--metrics", "127.0.0.1:%d" % port, "-o",
                              os.path.join(d, "r.db"), "--"] + target,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        try:
            for ln in p.stdout:
                lines.append(ln.rstrip("\n"))
                if ln.strip() == "ready":
                    break
            check(lines and lines[-1] == "ready" and not any("unexpected" in x for x in lines),
                  "the program's calls had the expected outcomes", lines=lines)
            want = {"ok": 3, "budget": 1, "forbidden": 1, "timeout": 1, "crash": 1, "error": 0 if a.pydir else 1}
            body, got = "", {}
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
                except OSError:
                    body = ""
                got = {m.group(1): float(m.group(2)) for m in
                       re.finditer(r'^leakguard_isolated_requests_total\{outcome="(\w+)"\} (\S+)$', body, re.M)}
                if got.get("ok") == 3 and got.get("crash") == 1:
                    break
                time.sleep(0.2)
            check(got == want, "leakguard_isolated_requests_total by outcome: %s" % want, got=got)
            check("# TYPE leakguard_isolated_requests_total counter" in body and
                  "# TYPE leakguard_isolated_request_peak_rss_bytes histogram" in body,
                  "a counter family and a histogram family", body=body[-3000:])
            buckets = {m.group(1): float(m.group(2)) for m in
                       re.finditer(r'^leakguard_isolated_request_peak_rss_bytes_bucket\{le="([^"]+)"\} (\S+)$',
                                   body, re.M)}
            count = re.search(r'^leakguard_isolated_request_peak_rss_bytes_count (\S+)$', body, re.M)
            total = re.search(r'^leakguard_isolated_request_peak_rss_bytes_sum (\S+)$', body, re.M)
            les = list(buckets)
            check(les == ["1048576", "4194304", "16777216", "67108864", "268435456", "1073741824", "4294967296", "+Inf"]
                  and all(buckets[les[i]] <= buckets[les[i + 1]] for i in range(len(les) - 1)),
                  "the histogram's buckets, 1 MiB to 4 GiB and +Inf, cumulative", buckets=buckets)
            check(buckets.get("+Inf") == 7 and count and float(count.group(1)) == 7,
                  "the histogram counts the 7 calls that ran a child", buckets=buckets,
                  count=count and count.group(1))
            check(buckets.get("4194304", 0) >= 3 and total and float(total.group(1)) >= 3 * (1 << 20),
                  "the 3 ok calls (1 MiB touched each) are under 4 MiB, and the sum holds them",
                  buckets=buckets, sum=total and total.group(1))
        finally:
            open(done, "w").close()
            try:
                out, err = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
        check(p.returncode == 0, "the run exits 0", exit=p.returncode, stderr=err[-2000:])
    print("== iso_metrics: %s" % ("all checks passed" if not fails else "%d FAILED" % len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
