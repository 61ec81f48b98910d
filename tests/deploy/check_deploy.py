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

# The exported families (docs/metrics.md; src/output/metrics.c serves them).
METRICS = [
    "leakguard_live_bytes",
    "leakguard_site_live_bytes",
    "leakguard_site_growth_bytes_per_second",
    "leakguard_leak_suspects",
    "leakguard_time_to_oom_seconds",
    "leakguard_guard_level",
    "leakguard_guard_actions_total",
    "leakguard_cgroup_memory_bytes",
    "leakguard_memory_pressure_avg10",
    "leakguard_gpu_memory_used_bytes",
    "leakguard_dropped_records_total",
    "leakguard_tag_live_bytes",
    "leakguard_tag_peak_bytes",
    # published by the guard engine (src/guard/engine.c, lgg_export)
    "leakguard_guard_source_level",
    "leakguard_guard_level_changes_total",
    "leakguard_guard_watched_processes",
    "leakguard_cgroup_oom_kills_total",
    "leakguard_gpu_memory_total_bytes",
]
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
            if m not in shown:
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
