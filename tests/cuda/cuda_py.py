#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The CUDA test cases of Python programs and of CUPTI's Unified Memory counters
(cases of cuda_test.py: python, torch_stats, storages, torch_notice, um, um_off)."""
import json
import os
import pty
import shutil
import re
import select
import socket
import subprocess
import sys
import time
import urllib.request
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import lgtest  # noqa: E402
from cuda_common import *  # noqa: E402,F401,F403

def case_python(t, args):
    py = "/usr/bin/python3"
    if not args.pydir or not os.path.exists(args.pydir):
        skip(t, "the leakguard Python module is not built (python3-dev)")
    if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0:
        skip(t, "python3-torch is not installed (scripts/deps.sh installs it)")
    script = os.path.join(args.src, "py_cuda.py")
    env = env_with(args, PYTHONPATH=args.pydir, PYTHONMALLOC="malloc")
    p = run(t, args, [py, script, "gc"], "gc.db", env=env)
    kv = kv_of(t, p, "py_cuda: mode=gc")
    t.check(kv.get("after_first") == 1 and kv.get("after_all") == 1,
            "gc_triggered_without_cuda_cleanup_count: counted when a collection freed CUDA objects and the "
            "allocator kept its reserve; not when it gave memory back, not when nothing was collected", kv=kv)
    p = run(t, args, [py, script, "holders", "3"], "holders.db", env=env, interval="0.2")
    kv = kv_of(t, p, "py_cuda: mode=holders")
    t.check(kv["device_bytes"] == kv["steps"] * MiB and kv["total"] == 16 * 1024 * MiB,
            "leakguard.cuda_memory(): the recorded device bytes and the GPU's memory", kv=kv)
    rep = t.report_json(p.db)
    if not rep["suspects"]:
        t.fatal("a suspect", report=rep)
    s = rep["suspects"][0]
    f0 = s.get("site") or {}  # the allocation site: the innermost Python line
    line = next(i + 1 for i, l in enumerate(open(script)) if l.rstrip().endswith("# LEAK-SITE"))
    t.check(s.get("space") == "device" and os.path.basename(f0.get("file") or "") == "py_cuda.py"
            and f0.get("line") == line, "rank 1: device memory at the Python line py_cuda.py:%d" % line,
            site=f0, space=s.get("space"))
    chains = [" \u2192 ".join(h.get("chain", [])) for h in s.get("holders", [])]
    t.check(any("kv_cache" in c and "CudaTensor" in c for c in chains),
            "held by the list of CUDA tensors (the holder explanation reads their device storage)",
            holders=s.get("holders"))


def case_torch_stats(t, args):
    """torch.cuda.memory_allocated/reserved (a faked torch.cuda) read by the Python module
    and stored per device at the snapshots; the report shows the last ones and the peak
    reserve (text and JSON)."""
    py = "/usr/bin/python3"
    if not args.pydir or not os.path.exists(args.pydir):
        skip(t, "the leakguard Python module is not built (python3-dev)")
    if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0:
        skip(t, "python3-torch is not installed (scripts/deps.sh installs it)")
    script = os.path.join(args.src, "py_cuda.py")
    env = env_with(args, PYTHONPATH=args.pydir, PYTHONMALLOC="malloc")
    db, gate = t.path("torchstats.db"), t.path("gate")
    argv = [args.leakguard, "run", "--quiet", "--interval", "0.1", "--output", db, "--", py, script, "torchstats",
            gate]
    print("  $ %s" % " ".join(argv), flush=True)
    proc = subprocess.Popen(argv, cwd=t.tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # each state is held until the collector has stored it: no timing assumption
    for n, want in enumerate(((64 * MiB, 96 * MiB), (96 * MiB, 160 * MiB)), 1):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if lgtest.db_query(db, "SELECT 1 FROM cuda_torch WHERE allocated_bytes=? AND reserved_bytes=?", want):
                    break
            except Exception:  # noqa: BLE001 - no database or table yet
                pass
            time.sleep(0.1)
        open("%s.%d" % (gate, n), "w").close()
    out, err = proc.communicate(timeout=120)
    t.check(proc.returncode == 0, "py_cuda.py torchstats exits 0", exit=proc.returncode, stderr=err[-3000:])
    p = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    p.db = db
    kv = kv_of(t, p, "py_cuda: mode=torchstats")
    rows = lgtest.db_query(p.db, "SELECT seq, device, allocated_bytes, reserved_bytes FROM cuda_torch ORDER BY seq")
    states = [r[2:] for i, r in enumerate(rows) if i == 0 or r[2:] != rows[i - 1][2:]]
    t.check(states == [(64 * MiB, 96 * MiB), (96 * MiB, 160 * MiB), (96 * MiB, 128 * MiB)]
            and all(r[1] == 0 for r in rows),
            "cuda_torch: device 0's figures at the snapshots, the three states in order", states=states,
            rows=rows[:20])
    t.check(rows and rows[-1][2:] == (kv["allocated"], kv["reserved"]),
            "the last row holds the last figures (read at exit)", last=rows[-1:], kv=kv)
    t.check(kv["seen_allocated"] == kv["allocated"], "leakguard.cuda_memory() reads the same figures", kv=kv)
    rep = t.report_json(p.db)
    g = (rep.get("gpus") or [{}])[0]
    got = {k: g.get(k) for k in ("torch_allocated_bytes", "torch_reserved_bytes", "torch_peak_reserved_bytes")}
    t.check(got == dict(torch_allocated_bytes=kv["allocated"], torch_reserved_bytes=kv["reserved"],
                        torch_peak_reserved_bytes=kv["peak_reserved"]),
            "report JSON gpus[]: torch_allocated_bytes, torch_reserved_bytes, torch_peak_reserved_bytes", got=got)
    text = t.run([args.leakguard, "report", p.db]).stdout
    t.check("torch.cuda: 96.0 MiB allocated by tensors, 128 MiB reserved by the caching allocator (32.0 MiB cached, "
            "peak reserve 160 MiB)" in text, "the text report's torch.cuda line", text=text[-2500:])
    q = run(t, args, [t.bin("cuda_scen"), "hold", "0.3"], "notorch.db")
    g = (t.report_json(q.db).get("gpus") or [{}])[0]
    t.check("torch_allocated_bytes" in g and g["torch_allocated_bytes"] is None
            and "torch.cuda:" not in t.run([args.leakguard, "report", q.db]).stdout,
            "a program without torch: null figures, no line", gpu=g)


def case_storages(t, args):
    """Storages held directly (torch.UntypedStorage, torch.TypedStorage) are holders of
    the device memory they point at, like tensors."""
    py = "/usr/bin/python3"
    if not args.pydir or not os.path.exists(args.pydir):
        skip(t, "the leakguard Python module is not built (python3-dev)")
    if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0:
        skip(t, "python3-torch is not installed (scripts/deps.sh installs it)")
    script = os.path.join(args.src, "py_cuda.py")
    env = env_with(args, PYTHONPATH=args.pydir, PYTHONMALLOC="malloc")
    p = run(t, args, [py, script, "storages", "3"], "storages.db", env=env, interval="0.2")
    rep = t.report_json(p.db)
    lines = {m: next(i + 1 for i, l in enumerate(open(script)) if l.rstrip().endswith("# " + m))
             for m in ("LEAK-UNTYPED", "LEAK-TYPED")}
    for marker, glob, cls in (("LEAK-UNTYPED", "storage_cache", "CudaStorage"),
                              ("LEAK-TYPED", "typed_cache", "CudaTypedStorage")):
        s = next((s for s in rep.get("suspects", []) if (s.get("site") or {}).get("line") == lines[marker]
                  and os.path.basename((s.get("site") or {}).get("file") or "") == "py_cuda.py"), None)
        t.check(s is not None and s.get("space") == "device", "a device suspect at py_cuda.py:%d (%s)"
                % (lines[marker], marker), suspects=[(x.get("site"), x.get("space")) for x in rep.get("suspects", [])])
        if s is None:
            continue
        hs = s.get("holders") or []
        chains = [(h.get("kind"), " \u2192 ".join(h.get("chain", []))) for h in hs]
        t.check(any(k == "storage" and glob in c and cls + "(" in c and "bytes, cuda)" in c for k, c in chains),
                "held by %s, a list of %s objects (kind storage)" % (glob, cls), holders=hs)


def case_torch_notice(t, args):
    p = run(t, args, [t.bin("cuda_scen"), "torchlike", args.c10], "torch.db")
    rep = t.report_json(p.db)
    t.check(rep.get("torch_cuda") is True, "report JSON: torch_cuda", torch_cuda=rep.get("torch_cuda"))
    text = t.run([args.leakguard, "report", p.db]).stdout
    t.check("PyTorch CUDA:" in text and "backend:cudaMallocAsync" in text and "cuda_memory()" in text,
            "the text report explains the caching allocator and how to see through it", text=text[-2500:])
    q = run(t, args, [t.bin("cuda_scen"), "arrays"], "plain.db")
    rq = t.report_json(q.db)
    t.check("torch_cuda" not in rq and "PyTorch" not in t.run([args.leakguard, "report", q.db]).stdout,
            "no PyTorch notice for a program without it", torch_cuda=rq.get("torch_cuda"))


def case_um(t, args):
    env = env_with(args, LEAKGUARD_CUPTI=args.cupti)
    p = run(t, args, [t.bin("cuda_scen"), "um"], "um.db", env=env, extra=["--cuda-um"])
    kv = kv_of(t, p, "cuda_scen:")
    t.check(kv["records"] == 8, "the stand-in CUPTI took the records (the counters were enabled)", kv=kv)
    t.check("CUPTI" not in p.stderr, "nothing said when CUPTI works", stderr=p.stderr)
    sites = gpu_sites(p.db)
    a = find_site(t, sites, "cuda_scen.c", "/* KEEP:um_a */")
    b = find_site(t, sites, "cuda_scen.c", "/* KEEP:um_b */")
    rows = um_rows(p.db)
    ua = [sum(rows[x][i] for x in (a or {}).get("stacks", []) if x in rows) for i in range(5)]
    ub = [sum(rows[x][i] for x in (b or {}).get("stacks", []) if x in rows) for i in range(5)]
    t.check(ua == [0, kv["a_gpu_faults"], kv["a_bytes_htod"], 0, 0],
            "managed site A: GPU page faults and bytes to the device (records inside its two blocks)", got=ua,
            rows=rows)
    t.check(ub == [kv["b_cpu_faults"], 0, 0, kv["b_bytes_dtoh"], kv["b_thrashing"]],
            "managed site B: CPU page faults, bytes to the host, thrashing", got=ub)
    t.check(rows.get(1) == (0, kv["unknown_gpu_faults"], 0, 0, 0),
            "a record outside every managed block is counted as not attributed", rows=rows)
    rep = t.report_json(p.db)
    um = rep.get("unified_memory") or []
    t.check(any("um_a" in u.get("site", "") and u.get("gpu_page_faults") == kv["a_gpu_faults"] for u in um),
            "report: unified_memory names the site", unified_memory=um)
    text = t.run([args.leakguard, "report", p.db]).stdout
    t.check("Unified Memory (CUPTI" in text and "20 GPU page faults" in text, "text report: the counters by site",
            text=text[-2500:])


def case_um_off(t, args):
    cases = [("missing", dict(LEAKGUARD_CUPTI="/nonexistent/libcupti.so"), "not found"),
             ("no UM support", dict(LEAKGUARD_CUPTI=args.cupti, LG_STANDIN_CUPTI_NO_UM=1),
              "UM_PROFILING_NOT_SUPPORTED"),
             ("another profiler", dict(LEAKGUARD_CUPTI=args.cupti, LG_STANDIN_CUPTI_BUSY=1),
              "MULTIPLE_SUBSCRIBERS")]
    for what, kv_env, word in cases:
        p = run(t, args, [t.bin("cuda_scen"), "managed"], what.replace(" ", "_") + ".db", env=env_with(args, **kv_env),
                extra=["--cuda-um"])
        lines = [l for l in p.stderr.splitlines() if "CUPTI" in l or "cuda-um" in l]
        t.check(len(lines) == 1 and lines[0].startswith("leakguard: cuda: pid ") and "CUPTI" in lines[0]
                and word in lines[0] and "--cuda-um off" in lines[0],
                "CUPTI %s: exactly one line says so" % what, stderr=p.stderr)
        kv = kv_of(t, p, "cuda_scen:")
        expect_site(t, find_site(t, gpu_sites(p.db), "cuda_scen.c", "/* KEEP:managed */"),
                    "CUPTI %s: managed memory recorded as before" % what, space="managed", live=kv["managed_bytes"])
    real = "/usr/local/cuda/lib64/libcupti.so"
    if os.path.exists(real):
        p = run(t, args, [t.bin("cuda_scen"), "managed"], "real.db", env=env_with(args, LEAKGUARD_CUPTI=real),
                extra=["--cuda-um"])
        lines = [l for l in p.stderr.splitlines() if "CUPTI" in l or "cuda-um" in l]
        t.check(len(lines) == 1 and "CUPTI" in lines[0] and "--cuda-um off" in lines[0],
                "the toolkit's CUPTI on the stand-in driver: refused, one line", stderr=p.stderr)
    else:
        print("  (no CUDA toolkit: the real CUPTI on the stand-in driver is not tried)", flush=True)
