#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks the shipped monitoring files (issue #3):

  deploy/prometheus/leakguard-rules.yml   promtool check rules; promtool test rules
                                          (tests/deploy/leakguard-rules.test.yml)
  deploy/grafana/leakguard-dashboard.json valid JSON, a Grafana dashboard (uid, title,
                                          panels with unique ids, grid positions,
                                          Prometheus targets)
and that they agree with the exporter: every metric the exporter documents
(docs/metrics.md) is shown on the dashboard, and rules and dashboard name no metric
that leakguard does not export.

  check_deploy.py [--root REPO]      exit 0 ok, 1 with one line per problem
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

# The exported families: leakguard's metrics catalog (src/output/metrics_catalog.h), the
# one place they are named; docs/metrics.md lists them (unit_test_metrics checks it).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "src", "output", "metrics_catalog.h")) as _f:
    METRICS = [m for m in re.findall(r'X\(\w+, "([a-z0-9_]+)"', _f.read()) if m.startswith("leakguard_")]
# In the catalog, not on the dashboard (each with the reason).
NOT_ON_DASHBOARD = {
    "leakguard_rss_bytes": "the live-bytes and cgroup panels show the memory",
    "leakguard_steps_total": "a progress counter, not memory",
    "leakguard_isolated_requests_total": "only programs that isolate calls publish it (docs/isolate.md)",
    "leakguard_isolated_request_peak_rss_bytes": "only programs that isolate calls publish it (docs/isolate.md)",
}
NAME_RE = re.compile(r"\bleakguard_[a-z0-9_]+")

problems = []


def problem(msg):
    problems.append(msg)
    print("check_deploy: " + msg, file=sys.stderr)


def run(cmd, cwd=None):
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return r.returncode, r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    rules = os.path.join(root, "deploy/prometheus/leakguard-rules.yml")
    rules_test = os.path.join(root, "tests/deploy/leakguard-rules.test.yml")
    dash_path = os.path.join(root, "deploy/grafana/leakguard-dashboard.json")

    # --- Prometheus rules
    promtool = shutil.which("promtool")
    if not promtool:
        problem("promtool not found (Debian package 'prometheus'; scripts/deps.sh installs it)")
    else:
        rc, out = run([promtool, "check", "rules", rules])
        print(out.rstrip())
        if rc != 0:
            problem("promtool check rules failed for " + rules)
        rc, out = run([promtool, "test", "rules", os.path.basename(rules_test)], cwd=os.path.dirname(rules_test))
        print(out.rstrip())
        if rc != 0:
            problem("promtool test rules failed for " + rules_test)
    with open(rules) as f:
        rules_text = f.read()
    for m in sorted(set(NAME_RE.findall(rules_text))):
        if m not in METRICS:
            problem(f"{rules}: unknown metric {m}")
    for want in ("leakguard_leak_suspects", "leakguard_time_to_oom_seconds", "leakguard_guard_level",
                 "leakguard_dropped_records_total", "leakguard_memory_pressure_avg10"):
        if want not in rules_text:
            problem(f"{rules}: no rule on {want}")

    # --- Grafana dashboard
    try:
        with open(dash_path) as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        problem(f"{dash_path}: not valid JSON: {e}")
        dash = None
    if dash is not None:
        for k in ("uid", "title", "panels", "schemaVersion"):
            if k not in dash:
                problem(f"{dash_path}: missing '{k}'")
        exprs = []
        ids = set()
        for p in dash.get("panels", []):
            pid = p.get("id")
            if pid in ids:
                problem(f"{dash_path}: duplicate panel id {pid}")
            ids.add(pid)
            gp = p.get("gridPos", {})
            if not all(isinstance(gp.get(k), int) for k in ("x", "y", "w", "h")) or gp.get("x", 0) + gp.get("w", 0) > 24:
                problem(f"{dash_path}: panel {pid} '{p.get('title')}' has a bad gridPos {gp}")
            if p.get("type") == "row":
                continue
            if not p.get("targets"):
                problem(f"{dash_path}: panel {pid} '{p.get('title')}' has no targets")
            for t in p.get("targets", []):
                e = t.get("expr", "")
                if not e or e.count("(") != e.count(")") or e.count("{") != e.count("}"):
                    problem(f"{dash_path}: panel {pid}: bad expression {e!r}")
                exprs.append(e)
        shown = set()
        for e in exprs:
            for m in NAME_RE.findall(e):
                shown.add(m)
                if m not in METRICS:
                    problem(f"{dash_path}: unknown metric {m}")
        for m in METRICS:
            if m not in shown and m not in NOT_ON_DASHBOARD:
                problem(f"{dash_path}: no panel shows {m}")
        print(f"{dash_path}: valid JSON, {len(dash.get('panels', []))} panels, {len(exprs)} queries")

    # --- docs describe every metric
    doc = os.path.join(root, "docs/metrics.md")
    if os.path.exists(doc):
        with open(doc) as f:
            text = f.read()
        for m in METRICS:
            if m not in text:
                problem(f"{doc}: {m} is not documented")

    if problems:
        print(f"check_deploy: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check_deploy: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
