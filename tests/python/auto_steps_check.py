#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Steps without code changes (python/sitecustomize.py, _leakguard_auto_steps): a PyTorch
program that never calls leakguard.step() gets a step at each step of its first
optimizer. The program trains a small model with SGD for N optimizer steps and keeps
128 KiB every step (a leak) and steps a second optimizer as often (not counted):
  default           the run has exactly N steps and the leak a growth per step;
  --steps off       no step at all;
  the program's own leakguard.step() (after each optimizer step, from step N/2 on):
                    the optimizer's steps count until that first call (N/2 + 1,
                    the first call's own optimizer step included), then only the
                    program's own (N/2): none of the optimizer's after.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77
N = 300

MAIN = """\
import os, sys, time, torch
own = len(sys.argv) > 1
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
other = torch.optim.Adam(torch.nn.Linear(4, 4).parameters())
kept = []
for i in range(%d):
    out = model(torch.randn(32, 64))
    out.sum().backward()
    opt.step()
    opt.zero_grad()
    other.step()
    kept.append(torch.randn(128, 256))  # 128 KiB a step
    time.sleep(0.01)
    if own and i >= %d:
        import leakguard
        leakguard.step()
""" % (N, N // 2)


def main():
    ap_lg, ap_pydir = sys.argv[sys.argv.index("--leakguard") + 1], sys.argv[sys.argv.index("--pydir") + 1]
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is missing: skipped")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="lgpy-steps-")
    script = os.path.join(tmp, "main.py")
    with open(script, "w") as f:
        f.write(MAIN)
    fails = []

    def run(name, extra, args):
        db = os.path.join(tmp, name + ".db")
        cmd = [ap_lg, "run", "-q", "-o", db] + extra + ["--", "/usr/bin/python3", script] + args
        print("$ " + " ".join(cmd), flush=True)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=240)
        rep = subprocess.run([ap_lg, "report", "-f", "json", db], stdout=subprocess.PIPE, text=True, timeout=120)
        d = json.loads(rep.stdout) if r.returncode == 0 and rep.returncode == 0 else {}
        runs = [p for p in d.get("runs", []) if "main.py" in (p.get("command") or "")]
        return (runs[0] if runs else {}), d

    def check(cond, what, **vals):
        print("  %s %s" % ("ok  " if cond else "FAIL", what), flush=True)
        if not cond:
            fails.append(what)
            for k, v in vals.items():
                print("         %s = %s" % (k, json.dumps(v, default=str)[:600]))

    p, d = run("auto", [], [])
    check(p.get("steps") == N, "default: one step per step of the first optimizer (%d)" % N, steps=p.get("steps"))
    sus = d.get("suspects") or []
    check(bool(sus) and isinstance(sus[0].get("growth_bytes_per_step"), (int, float)),
          "default: the leak has a growth per step", suspect=sus[:1])
    p, _ = run("off", ["--steps", "off"], [])
    check(p.get("steps") == 0, "--steps off: no step", steps=p.get("steps"))
    p, _ = run("own", [], ["own"])
    want = (N // 2 + 1) + (N - N // 2)
    check(p.get("steps") == want, "the program's own leakguard.step() alone counts from its first call (%d)"
          % want, steps=p.get("steps"))
    if fails:
        print("FAILED: %d check(s) (files in %s)" % (len(fails), tmp))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
