#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""GPU memory tests on the stand-in driver (no GPU): one --case per behaviour.

The programs (tests/cuda/*.c) reach the stand-in libcuda.so.1 in each of the three
ways and allocate GPU memory of every kind at lines marked KEEP:x / LEAK:x. Each
case runs one under `leakguard run` and compares the database (and the report) with
what the program knows it holds, exactly. Cases:
  ways       -lcuda, dlsym and cuGetProcAddress: the program checks inside that its
             entry points are leakguard's wrappers forwarding to exactly the driver's
             implementation (plain vs per-thread variant, v1 vs v2 ABI, cuCtxCreate by
             version); the same programs without leakguard check they get the
             driver's own pointers. Sites, bytes and blocks exact.
  probe      a program without libcuda probing for CUDA sees none under leakguard
  notes      IPC imports pass through and are noted when first called (never when only
             looked up); an unknown cuMem* entry point is passed through and noted once
  async, vmm, managed, pinned, ctx, threads, fork, arrays, entries   (see cuda_scen.c)
  live       the live view on a terminal shows GPU memory and names the GPU of a site
  metrics    Prometheus: leakguard_live_bytes{space,device}, cuda_memory_allocated_bytes,
             cuda_context_recreated_total, gc_triggered_without_cuda_cleanup_count; the
             guard (no NVML) watches the GPU as "gpu0-recorded"
  pressure   Prometheus: cuda_context_recreated_total and
             gc_triggered_without_cuda_cleanup_count non-zero and exact; the guard's
             level for gpu0-recorded rises as device memory nears the device's
  nvml       NVML timeline from a stand-in NVML fed by the stand-in driver:
             untracked = NVML - recorded = the stand-in's context overhead, exactly
  no_nvml    no NVML library: one line, nothing else changes
  python     the Python module: device memory allocated from Python is named by the
             Python line, CUDA tensors holding it are explained as its holders,
             leakguard.cuda_memory(), and the gc_triggered_without_cuda_cleanup_count rule
  um         --cuda-um: Unified Memory records (a stand-in CUPTI) attributed to the
             managed allocation sites that contain their addresses; report and JSON
  um_off     --cuda-um when CUPTI is missing, does not support UM counters, or is held
             by another profiler: one line, and the run goes on as before
  torch_stats  torch.cuda.memory_allocated/reserved (a faked torch.cuda) stored per
             device and shown by the report
  storages   torch storages held directly are holders of the device memory
  torch_notice  a process that loads PyTorch's CUDA allocator library (by its name,
             libc10_cuda.so) gets the report's PyTorch notice; others do not
  cudart     the real libcudart (static or shared, nvcc-built) against the stand-in:
             its entry points are routed through the wrappers (its allocations
             cannot run without the real driver's private export tables)
  rtsim_named, rtsim_anon   the static runtime's shape (cuda_rtsim): internals named
             libcudart_static_<sha1> (CUDA 13), or with names no rule knows, between
             the driver and the API call: each caller is a suspect at its own line
  gpu_check  scripts/gpu-check.sh on the stand-in driver: the driver-API checks pass,
             the ones that need a GPU are skipped and say so, one JSON summary
  kvcache, workspace   leaks: the site at rank 1, space device, GPU 0
  pool, ring           controls: no leak
"""
import fcntl
import json
import os
import pty
import shutil
import re
import select
import socket
import struct
import subprocess
import sys
import termios
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import lgtest  # noqa: E402

KiB = 1024
MiB = 1024 * 1024
CTX_OVERHEAD = 300 * MiB  # the stand-in's per-context device memory seen by NVML
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_common import *  # noqa: E402,F401,F403
from cuda_py import case_python, case_storages, case_torch_notice, case_torch_stats, case_um, case_um_off  # noqa: E402,F401


def extra(ap):
    ap.add_argument("--case", required=True)
    ap.add_argument("--driver-dir", required=True)
    ap.add_argument("--fake-nvml", required=True)
    ap.add_argument("--variant", choices=("static", "shared"))
    ap.add_argument("--nvcc", default="")
    ap.add_argument("--pydir", default="")
    ap.add_argument("--cupti", default="")
    ap.add_argument("--c10", default="")


# ---------------------------------------------------------------------- cases

def case_ways(t, args):
    for exe, mode, marker, extra_alloc in (("cuda_lcuda", "lcuda", "/* KEEP:lcuda */", 4096),
                                           ("cuda_ways", "dlsym", "/* KEEP:fp */", 0),
                                           ("cuda_ways", "getproc", "/* KEEP:fp */", 2 * 4096)):
        b = t.bin(exe)
        plain = t.run([b, mode, "--expect-wrapped", "0"], env=env_with(args))
        t.check(plain.returncode == 0, "%s %s without leakguard: the driver's own entry points" % (exe, mode),
                exit=plain.returncode, stderr=plain.stderr[-2000:])
        p = run(t, args, [b, mode, "--expect-wrapped", "1"], mode + ".db")
        kv = kv_of(t, p, "cuda_ways:")
        s = find_site(t, gpu_sites(p.db), "cuda_ways.c", marker)
        expect_site(t, s, "%s: the kept blocks" % mode, live=kv["keep_bytes"], blocks=kv["keep_blocks"],
                    alloc=kv["keep_bytes"], alloc_blocks=kv["keep_blocks"])
        ab, an = alloc_total(p.db)
        t.check(ab == kv["keep_bytes"] + 5 * MiB + extra_alloc,
                "%s: every device allocation recorded (alloc bytes summed over device sites)" % mode,
                got=ab, want=kv["keep_bytes"] + 5 * MiB + extra_alloc)
        t.check(space_total(p.db, "device") == kv["keep_bytes"], "%s: live device bytes at the end" % mode,
                got=space_total(p.db, "device"))
        rep = t.report_json(p.db)
        g = rep.get("gpus") or [{}]
        t.check(len(rep.get("gpus", [])) == 1 and g[0].get("device_bytes") == kv["keep_bytes"]
                and g[0].get("device") == 0 and g[0].get("contexts_created") == 1,
                "%s: report gpus[]: GPU 0, device bytes, one context" % mode, gpus=rep.get("gpus"))


def case_probe(t, args):
    b = t.bin("cuda_probe")
    env = env_with(args, LD_LIBRARY_PATH=None)
    plain = t.run([b], env=env)
    t.check(plain.returncode == 0, "cuda_probe without leakguard", stderr=plain.stderr)
    p = run(t, args, [b], "probe.db", env=env)
    t.check("cuda_probe: ok" in p.stdout, "under leakguard the program sees no CUDA driver", stdout=p.stdout,
            stderr=p.stderr)
    t.check("cuda" not in p.stderr.lower(), "and leakguard says nothing about CUDA", stderr=p.stderr)
    rep = t.report_json(p.db)
    t.check(rep.get("gpus") == [], "no GPU section in the report", gpus=rep.get("gpus"))


def case_notes(t, args):
    p = run(t, args, [t.bin("cuda_ways"), "getproc", "--expect-wrapped", "1"], "notes.db")
    cu = [l for l in p.stderr.splitlines() if "leakguard: cuda:" in l]
    imp = [l for l in cu if "cuMemImportFromShareableHandle" in l]
    t.check(len(imp) == 1 and imp[0].startswith("leakguard: cuda: pid ") and "IPC import called" in imp[0],
            "an IPC import called twice is noted once, on one line", stderr=p.stderr)
    t.check(not [l for l in cu if "cuMemPoolImport" in l or "cuIpcOpenMemHandle" in l],
            "IPC imports only looked up (as cudart does at its start) are not noted", stderr=p.stderr)
    fut = [l for l in cu if "cuMemAllocStandinFuture" in l]
    t.check(len(fut) == 1 and "unknown memory entry point; untracked" in fut[0],
            "an unknown cuMem* entry point is noted once, when looked up", stderr=p.stderr)
    t.check(len(cu) == 2, "nothing else is said about CUDA", lines=cu)
    rep = t.report_json(p.db)
    notes = sorted(rep.get("cuda_notes") or [])
    t.check(len(notes) == 2 and notes[0].startswith("cuMemAllocStandinFuture: unknown")
            and notes[1].startswith("cuMemImportFromShareableHandle: IPC import called"),
            "and the same two in the report's cuda_notes", notes=notes)
    q = run(t, args, [t.bin("cuda_lcuda"), "lcuda", "--expect-wrapped", "1"], "lcuda_notes.db")
    ipc = [l for l in q.stderr.splitlines() if "leakguard: cuda:" in l]
    t.check(len(ipc) == 1 and "cuIpcOpenMemHandle: IPC import called" in ipc[0],
            "an exported IPC import called by a -lcuda program: noted once", stderr=q.stderr)


def case_async(t, args):
    p = run(t, args, [t.bin("cuda_scen"), "async"], "async.db")
    kv = kv_of(t, p, "cuda_scen:")
    sites = gpu_sites(p.db)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:pool */"), "cuMemAllocFromPoolAsync",
                live=kv["pool_bytes"], blocks=kv["pool_blocks"], alloc_blocks=12)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:async */"), "cuMemAllocAsync (freed by both variants)",
                live=kv["async_bytes"], blocks=kv["async_blocks"], alloc_blocks=6)
    d = devices(p.db).get(0, {})
    t.check(d.get("pool_used_bytes") == kv["pool_used"] and d.get("pool_reserved_bytes") == kv["pool_reserved"],
            "pool used and reserved bytes (read from the driver's pool attributes)", device=d, want=kv)
    rep = t.report_json(p.db)
    g = (rep.get("gpus") or [{}])[0]
    t.check(g.get("pool_reserved_bytes") == kv["pool_reserved"], "report: pools reserved", gpu=g)


def case_vmm(t, args):
    p = run(t, args, [t.bin("cuda_scen"), "vmm"], "vmm.db")
    kv = kv_of(t, p, "cuda_scen:")
    s = find_site(t, gpu_sites(p.db), "cuda_scen.c", "/* KEEP:vmm */")
    expect_site(t, s, "cuMemCreate bytes by handle (6 created, 3 released)", live=kv["vmm_bytes"],
                blocks=kv["vmm_blocks"], alloc=12 * MiB, alloc_blocks=6)
    d = devices(p.db).get(0, {})
    t.check(d.get("vmm_mapped_bytes") == kv["mapped"], "cuMemMap'ed bytes after an unmap of four mappings",
            device=d)
    t.check(s is not None and kv["found"] == 1 and kv["site_of_mapped"] in s["stacks"],
            "lg_cuda_site_of(a mapped address) is the site of the handle mapped there", kv=kv,
            site=s and s["stacks"])


def case_managed(t, args):
    p = run(t, args, [t.bin("cuda_scen"), "managed"], "managed.db")
    kv = kv_of(t, p, "cuda_scen:")
    expect_site(t, find_site(t, gpu_sites(p.db), "cuda_scen.c", "/* KEEP:managed */"), "cuMemAllocManaged",
                space="managed", live=kv["managed_bytes"], blocks=kv["managed_blocks"])
    mm = space_total(p.db, "mmap")
    t.check(mm < 1 * MiB, "the driver's mmap of managed pages is not also mmap memory", mmap_live=mm)


def case_pinned(t, args):
    p = run(t, args, [t.bin("cuda_scen"), "pinned"], "pinned.db")
    kv = kv_of(t, p, "cuda_scen:")
    sites = gpu_sites(p.db)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:pinned_host */"),
                "cuMemAllocHost_v2 (the driver calls cuMemHostAlloc inside: counted once)", space="pinned",
                live=kv["host_bytes"], blocks=kv["host_blocks"], alloc_blocks=4)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:pinned_hostalloc */"), "cuMemHostAlloc",
                space="pinned", live=kv["hostalloc_bytes"], blocks=kv["hostalloc_blocks"], alloc_blocks=2)
    mm = space_total(p.db, "mmap")
    t.check(mm < 256 * KiB, "pinned pages (mmap'ed by the driver inside the call) are not also mmap memory",
            mmap_live=mm)
    inside = [s for s in sites if any("libcuda" in (f[3] or "") for f in s["frames"][:1])]
    t.check(not inside, "no host or mmap site inside the driver (its bookkeeping malloc was inside a hooked call)",
            sites=[(s["space"], s["live_bytes"], s["frames"][:2]) for s in inside])
    d = devices(p.db).get(0, {})
    t.check(d.get("registered_bytes") == kv["registered"], "cuMemHostRegister: its own gauge", device=d)


def case_ctx(t, args):
    p = run(t, args, [t.bin("cuda_scen"), "ctx"], "ctx.db", env=env_with(args, LG_STANDIN_DEVICES=2))
    kv = kv_of(t, p, "cuda_scen:")
    sites = gpu_sites(p.db)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:ctx_a */"), "destroyed context: records released",
                live=0, blocks=0, alloc_blocks=5)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:ctx_b */"), "context made again", live=kv["b_bytes"],
                blocks=kv["b_blocks"])
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:prim1 */"), "primary context reset: released",
                live=0, blocks=0, alloc_blocks=2)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:prim2 */"),
                "primary context retained again, then its last reference released: released",
                live=0, blocks=0, alloc_blocks=1)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:dev1 */"), "a context on GPU 1", device=1,
                live=kv["dev1_bytes"], blocks=kv["dev1_blocks"])
    d = devices(p.db)
    d0, d1 = d.get(0, {}), d.get(1, {})
    t.check((d0.get("contexts_created"), d0.get("contexts_destroyed"), d0.get("contexts_recreated")) ==
            (kv["created0"], kv["destroyed0"], kv["recreated0"]),
            "GPU 0 contexts: created, destroyed, recreated (a second retain is not a new context)", device0=d0,
            want=kv)
    t.check(d1.get("contexts_created") == kv["created1"] and d1.get("contexts_recreated") == 0,
            "GPU 1: one context, not recreated", device1=d1)
    rep = t.report_json(p.db)
    t.check(sorted(g["device"] for g in rep.get("gpus", [])) == [0, 1], "report: both GPUs", gpus=rep.get("gpus"))


def case_entries(t, args):
    """cuMemAllocPitch_v2, cuMemAllocFromPoolAsync_ptsz + cuMemFreeAsync_ptsz (a free
    counts when enqueued), cuMemPoolDestroy, cuMemHostUnregister, cuCtxCreate_v3:
    exact counts and bytes."""
    p = run(t, args, [t.bin("cuda_scen"), "entries"], "entries.db")
    kv = kv_of(t, p, "cuda_scen:")
    calls = {k: kv[k] for k in kv if k.startswith("calls_")}
    t.check(calls == dict(calls_pitch=4, calls_ptsz=5, calls_free_ptsz=2, calls_destroy=1, calls_unreg=2, calls_v3=3),
            "each entry point reached the driver's implementation as often as the program called it", calls=calls)
    sites = gpu_sites(p.db)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:pitch */"), "cuMemAllocPitch_v2: pitch x height",
                live=kv["pitch_bytes"], blocks=kv["pitch_blocks"], alloc=4 * 64 * KiB, alloc_blocks=4)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:pool_ptsz */"),
                "cuMemAllocFromPoolAsync_ptsz / cuMemFreeAsync_ptsz", live=kv["ptsz_bytes"], blocks=kv["ptsz_blocks"],
                alloc=5 * 128 * KiB, alloc_blocks=5)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:pool_gone */"), "a destroyed pool's blocks, freed",
                live=0, blocks=0, alloc=3 * 256 * KiB, alloc_blocks=3)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:ctx_v3 */"),
                "cuCtxCreate_v3: the destroyed context's blocks go, the new one's stay", live=kv["v3_bytes"],
                blocks=kv["v3_blocks"], alloc=3 * 64 * KiB, alloc_blocks=3)
    # stream order: after cuMemFreeAsync the driver still holds the blocks until the
    # stream gets there; the recorder counts them freed at once
    t.check(kv["enq_pending"] == 2 and kv["enq_driver_used"] == 5 * 128 * KiB
            and kv["enq_recorded"] == kv["pitch_bytes"] + kv["ptsz_bytes"],
            "a free counts when enqueued: recorded %d bytes while the driver, 2 frees pending, still used %d"
            % (kv["enq_recorded"], kv["enq_driver_used"]), kv=kv)
    t.check(kv["sync_pending"] == 0 and kv["sync_driver_used"] == kv["ptsz_bytes"],
            "after the stream's sync the driver agrees", kv=kv)
    t.check(kv["reserved_before"] == 4 * MiB and kv["reserved_after"] == 2 * MiB,
            "cuMemPoolDestroy: the destroyed pool's reserve leaves the device's pool figure", kv=kv)
    t.check(kv["registered"] == 2 * MiB, "cuMemHostUnregister: the registered gauge drops by that buffer only", kv=kv)
    d = devices(p.db).get(0, {})
    got = {k: d.get(k) for k in ("pool_reserved_bytes", "pool_used_bytes", "registered_bytes", "contexts_created",
                                 "contexts_destroyed", "contexts_recreated")}
    t.check(got == dict(pool_reserved_bytes=2 * MiB, pool_used_bytes=kv["ptsz_bytes"], registered_bytes=2 * MiB,
                        contexts_created=3, contexts_destroyed=1, contexts_recreated=1),
            "database cuda_devices: pools, registered bytes, three v3 contexts (one destroyed, one recreated)",
            got=got)


def case_threads(t, args):
    p = run(t, args, [t.bin("cuda_scen"), "threads"], "threads.db")
    kv = kv_of(t, p, "cuda_scen:")
    sites = gpu_sites(p.db)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:thread */"), "8 threads' kept blocks",
                live=kv["thread_bytes"], blocks=kv["thread_blocks"])
    ab, an = alloc_total(p.db)
    t.check(an == kv["churn_blocks"] + kv["thread_blocks"], "every allocation of every thread counted",
            got=an, want=kv["churn_blocks"] + kv["thread_blocks"])
    t.check(space_total(p.db, "device") == kv["thread_bytes"], "live device bytes: only the kept blocks",
            got=space_total(p.db, "device"))
    rep = t.report_json(p.db)
    t.check(rep["runs"][0]["dropped_records"] == 0, "nothing dropped", run=rep["runs"][0])


def case_fork(t, args):
    p = run(t, args, [t.bin("cuda_scen"), "fork"], "fork.db")
    kv = kv_of(t, p, "cuda_scen: mode=fork ")
    ckv = kv_of(t, p, "cuda_scen: mode=fork-child")
    procs = lgtest.db_query(p.db, "SELECT proc, kind FROM processes ORDER BY proc")
    t.check([k for _, k in procs] == ["start", "fork"], "two processes: the program and its forked child",
            procs=procs)
    sites = gpu_sites(p.db)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:parent */", proc=1), "parent",
                live=kv["parent_bytes"], blocks=kv["parent_blocks"])
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:child */", proc=2), "child's own",
                live=ckv["child_bytes"], blocks=ckv["child_blocks"])
    t.check(not [s for s in sites if s["proc"] == 1 and any(f[2] == t.site("cuda_scen.c", "/* KEEP:child */").line
                                                            for f in s["frames"])],
            "the child's allocations are not the parent's", sites=[(s["proc"], s["frames"][:1]) for s in sites])


def case_arrays(t, args):
    p = run(t, args, [t.bin("cuda_scen"), "arrays"], "arrays.db")
    kv = kv_of(t, p, "cuda_scen:")
    sites = gpu_sites(p.db)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:array2d */"), "cuArrayCreate_v2",
                live=kv["array2d_bytes"], blocks=kv["array2d_blocks"], alloc_blocks=3)
    expect_site(t, find_site(t, sites, "cuda_scen.c", "/* KEEP:array3d */"), "cuArray3DCreate_v2",
                live=kv["array3d_bytes"], blocks=kv["array3d_blocks"])


def case_cudart(t, args):
    exe = os.path.join(args.bin, "cudart_route_" + args.variant)
    if not args.nvcc or "NOTFOUND" in args.nvcc or not os.path.exists(exe):
        skip(t, "no CUDA toolkit (nvcc not found in /usr/local/cuda/bin): the real libcudart (%s) is not "
             "tested against the stand-in driver" % args.variant)
    plain = t.run([exe, "0"], env=env_with(args))
    t.check(plain.returncode == 0, "%s cudart without leakguard holds the driver's own entry points" % args.variant,
            exit=plain.returncode, stderr=plain.stderr[-3000:])
    p = run(t, args, [exe, "1"], "cudart.db")
    kv = kv_of(t, p, "cudart_route:")
    t.check(kv["wrapped"] >= 20 and kv["requests"] >= 100,
            "%s cudart: %d entry points asked through cuGetProcAddress_v2, %d tracked ones wrapped"
            % (args.variant, kv["requests"], kv["wrapped"]), kv=kv)
    s = find_site(t, gpu_sites(p.db), "cudart_route.cu", "/* KEEP:cudart */")
    expect_site(t, s, "an allocation through cudart's own pointer, at the caller's line", live=kv["keep_bytes"],
                blocks=kv["keep_blocks"])
    # cudart asks for cuMemPoolImportPointer and cuMemPoolImportFromShareableHandle at
    # its start (the stand-in has them, as a driver does) and never calls them
    asked = set()
    log = t.path("procs-%s.txt" % args.variant)
    q = t.run([exe, "1"], env=env_with(args, LD_PRELOAD=None, LG_STANDIN_PROC_LOG=log))
    if os.path.exists(log):
        asked = {l.split()[0] for l in open(log) if l.strip()}
    t.check({"cuMemPoolImportPointer", "cuMemPoolImportFromShareableHandle"} <= asked,
            "%s cudart asks for the two pool imports (%d names asked)" % (args.variant, len(asked)), exit=q.returncode)
    cu = [l for l in p.stderr.splitlines() if "leakguard: cuda:" in l]
    t.check(not cu and not t.report_json(p.db).get("cuda_notes"),
            "%s cudart: no note (nothing unknown looked up, no import called)" % args.variant, lines=cu)


def case_live(t, args):
    argv = [args.leakguard, "run", "--interval", "0.2", "--output", t.path("live.db"), "--",
            t.bin("cuda_scen"), "workspace", "3"]
    print("  $ (pty) %s" % " ".join(argv), flush=True)
    env = dict(env_with(args), TERM="xterm")  # a terminal that takes the view's escapes
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(t.tmp)
        # a known size: the view keeps the last lines of a 40x200 screen (a terminal of
        # unknown size gets plain lines)
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
        os.execve(argv[0], argv, env)
    buf = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    _, status = os.waitpid(pid, 0)
    text = buf.decode(errors="replace")
    t.check(os.WEXITSTATUS(status) == 0, "run on a terminal exits 0", status=status)
    t.check("GPU live " in text and "GPU memory 16.0 GiB" in text, "the live view has a GPU line (OOM against the GPU)",
            out=text[-3000:])
    t.check("[GPU0 device] custom_op" in text, "the growing site is named with its GPU and space", out=text[-3000:])


def case_metrics(t, args):
    sk = socket.socket()
    sk.bind(("127.0.0.1", 0))
    port = sk.getsockname()[1]
    sk.close()
    argv = [args.leakguard, "run", "--quiet", "--interval", "0.2", "--output", t.path("m.db"),
            "--metrics", "127.0.0.1:%d" % port, "--guard-dry-run", "--", t.bin("cuda_scen"), "workspace", "4"]
    print("  $ %s" % " ".join(argv), flush=True)
    p = subprocess.Popen(argv, cwd=t.tmp, env=env_with(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    got, body = {}, ""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.5)
        try:
            got, body = scrape("http://127.0.0.1:%d/metrics" % port)
        except OSError:
            continue
        if got.get('leakguard_gpu_memory_used_bytes{device="0",source="recorder"}', 0) > 0 and \
                got.get('cuda_memory_allocated_bytes{device="0"}', 0) > 8 * MiB:
            break
    out, err = p.communicate(timeout=60)
    t.check(p.returncode == 0, "run exits 0", exit=p.returncode, stderr=err[-3000:])
    dev = got.get('leakguard_live_bytes{space="device",device="0"}')
    t.check(dev is not None and dev > 8 * MiB, "leakguard_live_bytes{space=\"device\",device=\"0\"}", value=dev,
            body=body[-3000:])
    t.check(got.get('cuda_memory_allocated_bytes{device="0"}') == dev, "cuda_memory_allocated_bytes{device} "
            "(same snapshot)", got=got.get('cuda_memory_allocated_bytes{device="0"}'), dev=dev)
    t.check(got.get('leakguard_live_bytes{space="host"}', -1) >= 0 and "leakguard_live_bytes" not in got,
            "leakguard_live_bytes has a space label on every series", body=body[-3000:])
    t.check(got.get('cuda_context_recreated_total{device="0"}') == 0 and "# TYPE cuda_context_recreated_total counter"
            in body, "cuda_context_recreated_total{device} (a counter)", body=body[-3000:])
    t.check(got.get("gc_triggered_without_cuda_cleanup_count") == 0, "gc_triggered_without_cuda_cleanup_count",
            body=body[-3000:])
    t.check('leakguard_guard_source_level{source="gpu0-recorded"}' in got and
            got.get('leakguard_gpu_memory_total_bytes{device="0",source="recorder"}') == 16 * 1024 * MiB,
            "no NVML: the guard watches GPU 0 from what the recorder saw", body=body[-3000:])
    t.check("GPU source off" in err, "and says once that NVML is absent", stderr=err[-2000:])


def case_pressure(t, args):
    """Prometheus, non-zero: cuda_context_recreated_total and
    gc_triggered_without_cuda_cleanup_count; the guard (no NVML) raises the level of
    its gpu0-recorded source when device memory passes 75 % of the device's."""
    sk = socket.socket()
    sk.bind(("127.0.0.1", 0))
    port = sk.getsockname()[1]
    sk.close()
    argv = [args.leakguard, "run", "--quiet", "--interval", "0.2", "--output", t.path("p.db"),
            "--metrics", "127.0.0.1:%d" % port, "--guard-dry-run", "--", t.bin("cuda_scen"), "pressure", "60",
            t.path("stop"), t.path("go")]
    print("  $ %s" % " ".join(argv), flush=True)
    env = env_with(args, LG_STANDIN_MEM=256 * MiB)
    p = subprocess.Popen(argv, cwd=t.tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    src = 'leakguard_guard_source_level{source="gpu0-recorded"}'
    levels, got, body = [], {}, ""
    deadline = time.monotonic() + 80
    while time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
        try:
            got, body = scrape("http://127.0.0.1:%d/metrics" % port)
        except OSError:
            continue
        if src in got and (not levels or levels[-1][0] != got[src]):
            levels.append((got[src], got.get('cuda_memory_allocated_bytes{device="0"}')))
        if levels and levels[0][0] == 0 and not os.path.exists(t.path("go")):
            open(t.path("go"), "w").close()  # the normal level seen: grow
        if levels and levels[-1][0] >= 1 and got.get("gc_triggered_without_cuda_cleanup_count", 0) > 0:
            open(t.path("stop"), "w").close()  # seen: the program may end
    out, err = p.communicate(timeout=90)
    t.check(p.returncode == 0, "run exits 0", exit=p.returncode, stderr=err[-3000:])
    kv = kv_of(t, subprocess.CompletedProcess(argv, 0, out, err), "cuda_scen:")
    t.check(got.get('cuda_context_recreated_total{device="0"}') == kv["recreated"],
            "cuda_context_recreated_total{device=\"0\"} = %d (contexts made again after a destroy)" % kv["recreated"],
            got=got.get('cuda_context_recreated_total{device="0"}'), body=body[-2500:])
    t.check(got.get("gc_triggered_without_cuda_cleanup_count") == kv["gc"],
            "gc_triggered_without_cuda_cleanup_count = %d" % kv["gc"],
            got=got.get("gc_triggered_without_cuda_cleanup_count"))
    t.check(len(levels) >= 2 and levels[0][0] == 0 and max(v for v, _ in levels) >= 1,
            "the guard's gpu0-recorded source went from normal (0) up (>= 1: warn) as device memory neared the "
            "device's", levels=levels)
    up = next((b for v, b in levels if v >= 1), None)
    t.check(up is not None and up >= 0.5 * 256 * MiB, "and it rose with the recorded device memory (%s bytes)" % up,
            levels=levels)


def case_nvml(t, args):
    f, env = nvml_env(t, args)
    p = run(t, args, [t.bin("cuda_scen"), "hold", "1.5"], "nvml.db", env=env, interval="0.2")
    kv = kv_of(t, p, "cuda_scen:")
    t.check("nvml" not in p.stderr.lower(), "NVML found: nothing said", stderr=p.stderr)
    dev = lgtest.db_query(p.db, "SELECT count(*), min(total_bytes), max(used_bytes) FROM nvml WHERE device=0")[0]
    t.check(dev[0] >= 3 and dev[1] == 16 * 1024 * MiB, "NVML device samples at the snapshot interval", nvml=dev)
    pr = lgtest.db_query(p.db, "SELECT count(*), max(used_bytes), min(proc), max(pid) FROM nvml_processes")[0]
    pid = lgtest.db_query(p.db, "SELECT pid FROM processes WHERE proc=1")[0][0]
    t.check(pr[0] >= 3 and pr[1] == kv["hold_bytes"] + CTX_OVERHEAD and pr[2] == 1 and pr[3] == pid,
            "NVML per-process samples of the recorded process", nvml_processes=pr, pid=pid)
    # same clock: NVML samples lie within the snapshots' time span
    span = lgtest.db_query(p.db, "SELECT min(t_ns), max(t_ns) FROM snapshots")[0]
    nspan = lgtest.db_query(p.db, "SELECT min(t_ns), max(t_ns) FROM nvml")[0]
    t.check(span[0] - 1e9 <= nspan[0] and nspan[1] <= span[1] + 1e9, "NVML on the collector's clock",
            snapshots=span, nvml=nspan)
    rep = t.report_json(p.db)
    g = (rep.get("gpus") or [{}])[0]
    n = g.get("nvml") or {}
    t.check(n.get("process_bytes") == kv["hold_bytes"] + CTX_OVERHEAD and n.get("untracked_bytes") == CTX_OVERHEAD,
            "untracked = NVML - recorded = the context's overhead", gpu=g)
    text = t.run([args.leakguard, "report", p.db])
    t.check("untracked 300 MiB" in text.stdout, "the text report says the untracked bytes", stdout=text.stdout)


def case_no_nvml(t, args):
    p = run(t, args, [t.bin("cuda_scen"), "hold", "0.5"], "nonvml.db", interval="0.2")
    kv = kv_of(t, p, "cuda_scen:")
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    t.check(len(lines) == 1 and lines[0].startswith("leakguard: ") and "NVML" in lines[0]
            and "not found" in lines[0], "no NVML: exactly one line says so", stderr=p.stderr)
    expect_site(t, find_site(t, gpu_sites(p.db), "cuda_scen.c", "/* KEEP:hold */"), "recording is unchanged",
                live=kv["hold_bytes"], blocks=10)
    rep = t.report_json(p.db)
    g = (rep.get("gpus") or [{}])[0]
    t.check(g.get("nvml", 0) is None and "not found" in (rep.get("nvml") or ""),
            "report: no NVML figures, and why", gpus=rep.get("gpus"), nvml=rep.get("nvml"))
    plain = t.run([t.bin("cuda_probe")], env=env_with(args, LD_LIBRARY_PATH=None))
    q = run(t, args, [t.bin("cuda_probe")], "nocuda.db", env=env_with(args, LD_LIBRARY_PATH=None))
    t.check(plain.returncode == 0 and q.stderr.strip() == "", "a program without CUDA: not a word about NVML",
            stderr=q.stderr)


def case_leak(t, args, mode, marker):
    p = run(t, args, [t.bin("cuda_scen"), mode, "4"], mode + ".db", interval="0.1")
    rep = t.report_json(p.db)
    site = t.site("cuda_scen.c", marker)
    t.check(rep["verdict"] == "leak", "%s: verdict leak" % mode, verdict=rep["verdict"])
    if not rep["suspects"]:
        t.finish()
    top = rep["suspects"][0]
    t.check_site(top, site, "rank-1 suspect is the planted site " + site.describe())
    t.check(top.get("space") == "device" and top.get("device") == 0, "rank 1: space device, device 0",
            suspect={k: top.get(k) for k in ("space", "device", "live_bytes", "pattern")})
    t.check(top.get("time_to_oom_s") is not None and top["time_to_oom_s"] > 0,
            "time to OOM against the device's memory", suspect=top)
    text = t.run([args.leakguard, "report", p.db]).stdout
    t.check("device memory on GPU 0" in text, "the text report names the GPU", text=text[:3000])


def case_rtsim(t, args, mode):
    """The static CUDA runtime's shape (cuda_rtsim_rt.c, no debug information): two
    call sites of one runtime function are two suspects, each at its own line."""
    p = run(t, args, [t.bin("cuda_rtsim"), mode, "3"], "rtsim.db", interval="0.1")
    rep = t.report_json(p.db)
    t.check(rep["verdict"] == "leak", "%s: verdict leak" % mode, verdict=rep["verdict"])
    sus = rep.get("suspects") or []
    got = sorted(((s.get("site") or {}).get("file") or "", (s.get("site") or {}).get("line"), s.get("space"),
                  s.get("device")) for s in sus)
    want = sorted((t.site("cuda_rtsim.c", "/* LEAK:rt_%s_%s */" % (mode, x)).path,
                   t.site("cuda_rtsim.c", "/* LEAK:rt_%s_%s */" % (mode, x)).line, "device", 0) for x in "ab")
    t.check([(os.path.basename(f), ln, sp, d) for f, ln, sp, d in got] ==
            [(os.path.basename(f), ln, sp, d) for f, ln, sp, d in want],
            "%s: two suspects, each at its caller's line (not one inside the runtime)" % mode, got=got, want=want,
            suspects=[(s.get("site"), s.get("frames", [])[:4]) for s in sus][:4])
    for s in sus:
        f0 = (s.get("frames") or [{}])[0]
        t.check(f0 == {k: v for k, v in f0.items()} and (s.get("site") or {}).get("function") == f0.get("function"),
                "%s: the suspect's first frame is its site" % mode, site=s.get("site"), frame0=f0)
    text = t.run([args.leakguard, "report", p.db]).stdout
    t.check("stacks merged" not in text, "%s: no site merges the two callers" % mode, text=text[:3000])


def case_gpu_check(t, args):
    """scripts/gpu-check.sh end to end on the stand-in driver: one JSON summary; the
    driver-API checks (leak, control, exact, NVML, cost, Unified Memory) pass; what
    needs a GPU is skipped and says so; nothing fails."""
    script = os.path.join(args.src, "..", "..", "scripts", "gpu-check.sh")
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.leakguard)))
    out = t.path("gpu-check.json")
    env = env_with(args, LG_GPU_CHECK_LIBCUDA=os.path.join(args.driver_dir, "libcuda.so.1"), LG_GPU_SECONDS=3,
                   LEAKGUARD_NVML=None)
    p = t.run([script, "--build", build, "--out", out], env=env, timeout=900)
    try:
        summary = json.load(open(out))
        stdout_summary = json.loads(p.stdout)
    except (OSError, ValueError) as e:
        t.fatal("gpu-check.sh wrote its JSON summary (stdout and --out)", error=str(e), stdout=p.stdout[-2000:],
                stderr=p.stderr[-3000:])
    t.check(summary == stdout_summary, "the same summary on stdout and in --out")
    checks = {c["name"]: c for c in summary.get("checks", [])}
    failed = [(n, c.get("detail")) for n, c in checks.items() if c["status"] == "fail"]
    t.check(p.returncode == 0 and summary.get("failed") == 0 and not failed, "exit 0, no check failed",
            exit=p.returncode, failed=failed, stderr=p.stderr[-3000:])
    t.check(summary.get("standin") is True and summary.get("gpu") == "none", "the summary says: stand-in, no GPU",
            summary={k: v for k, v in summary.items() if k != "checks"})
    must_pass = ["build: leakguard", "build: gpu_driver (gcc, -lcuda)", "driver API: cuMemAlloc_v2 leak at rank 1",
                 "driver API: no leak", "driver API: exact device, pinned, managed",
                 "NVML timeline (driver API): process >= recorded, untracked named",
                 "Unified Memory (driver API): page faults and migrations next to the managed site"]
    must_pass += [n for n in checks if n.startswith("cost (driver API")]
    for n in must_pass:
        c = checks.get(n, {})
        t.check(c.get("status") == "pass" and c.get("ok") is True, "pass: " + n, check=c)
    gpu_only = [n for n in checks if n.startswith(("cudart-", "torch", "cost (cudart)", "NVML timeline (cudart)",
                                                   "Unified Memory (cudart)"))]
    t.check(len(gpu_only) == 15 and all(checks[n]["status"] == "skipped" and checks[n]["ok"] is None
                                        and "no GPU" in checks[n]["detail"] for n in gpu_only),
            "the 15 checks that need a GPU: skipped, 'no GPU'", checks={n: checks[n] for n in gpu_only})
    t.check(summary.get("passed") + summary.get("skipped") == len(checks), "counts add up",
            passed=summary.get("passed"), skipped=summary.get("skipped"), n=len(checks))
    cost = [checks[n].get("detail") or {} for n in checks if n.startswith("cost (driver API")]
    t.check(len(cost) == 1 and cost[0].get("judged") is False and len(cost[0].get("modes") or {}) == 3,
            "the stand-in's cost figures: all three modes measured, not judged (timing is the machine's)",
            cost=cost)
    ex = checks.get("driver API: exact device, pinned, managed", {}).get("detail") or {}
    t.check(isinstance(ex, dict) and ex.get("sites", {}).get("KEEP:driver", {}).get("got", {}).get("bytes") == 9 << 20,
            "the exact check's figures are in the summary", detail=ex)


def case_control(t, args, mode):
    p = run(t, args, [t.bin("cuda_scen"), mode, "4"], mode + ".db", interval="0.1")
    rep = t.report_json(p.db)
    t.check(rep["verdict"] == "no-leak", "%s: no leak" % mode, suspects=rep["suspects"][:3])
    g = rep.get("gpus") or [{}]
    t.check(g[0].get("peak_device_bytes", 0) > 0, "%s: GPU memory was recorded" % mode, gpus=rep.get("gpus"))


def main():
    args = lgtest.parse_args(extra)
    args.driver_dir = os.path.abspath(args.driver_dir)
    args.fake_nvml = os.path.abspath(args.fake_nvml)
    t = lgtest.Test("cuda-" + args.case, args)
    c = args.case
    if c in ("kvcache", "workspace"):
        case_leak(t, args, c, "/* LEAK:%s */" % c)
    elif c in ("rtsim_named", "rtsim_anon"):
        case_rtsim(t, args, c.split("_")[1])
    elif c in ("pool", "ring"):
        case_control(t, args, c)
    elif "case_" + c in globals():
        globals()["case_" + c](t, args)
    else:
        t.fatal("known case", case=c)
    t.finish()


if __name__ == "__main__":
    main()
