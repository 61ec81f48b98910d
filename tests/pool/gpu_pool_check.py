# SPDX-License-Identifier: MIT
"""liblgpool on a real GPU (scripts/gpu-check.sh, "liblgpool" checks); also runs on the
tests' stand-in driver (abi mode). Prints one JSON line with "ok".
  gpu_pool_check.py LIBLGPOOL abi     the pluggable ABI through ctypes: reuse, trims
  gpu_pool_check.py LIBLGPOOL torch   torch.cuda with CUDAPluggableAllocator(liblgpool)
"""
import ctypes
import json
import os
import sys

lib_path, mode = sys.argv[1], sys.argv[2]
os.environ.setdefault("LEAKGUARD_POOL_BACKEND", "cuda")
FIELDS = ["reserved", "peak_reserved", "allocated", "peak_allocated", "requested",
          "reserved_young", "reserved_middle", "reserved_old", "cached_young", "cached_middle", "cached_old",
          "driver_allocs", "driver_frees", "event_records", "event_queries", "double_frees", "unknown_frees",
          "alloc_failures", "trims_normal", "trims_warn", "trims_breaker", "trims_emergency"]


class Stats(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint64) for f in FIELDS]


def stats(lib):
    s = Stats()
    return {f: getattr(s, f) for f in FIELDS} if lib.lgpool_stats(0, ctypes.byref(s)) == 0 else None


if mode == "abi":
    lib = ctypes.CDLL(lib_path)
    lib.lgpool_alloc.restype = ctypes.c_void_p
    lib.lgpool_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.lgpool_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.lgpool_trim.restype = ctypes.c_size_t
    ptrs = [lib.lgpool_alloc(1 << 20, 0, None) for _ in range(8)]
    for p in ptrs:
        lib.lgpool_free(p, 1 << 20, 0, None)
    again = lib.lgpool_alloc(1 << 20, 0, None)  # same stream: reused, no driver call
    s1 = stats(lib)
    lib.lgpool_free(again, 1 << 20, 0, None)
    freed = lib.lgpool_trim(0, 3)  # emergency: every cache
    s2 = stats(lib)
    ok = (all(ptrs) and again in ptrs and s1["driver_allocs"] == 4 and freed == 8 << 20
          and s2["reserved"] == 0 and s2["allocated"] == 0)
    print(json.dumps({"ok": ok, "before_trim": s1, "trimmed_bytes": freed, "after": s2}))
else:
    import torch
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "lgpool_alloc", "lgpool_free")
    torch.cuda.memory.change_current_allocator(alloc)
    lib = ctypes.CDLL(lib_path)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).cuda()
    opt = torch.optim.Adam(model.parameters())
    for _ in range(50):
        x = torch.randn(256, 1024, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    s = stats(lib)
    ok = s is not None and s["driver_allocs"] > 0 and s["driver_allocs"] < 200 and s["double_frees"] == 0 \
        and s["unknown_frees"] == 0 and torch.isfinite(loss).item()
    print(json.dumps({"ok": bool(ok), "stats": s, "loss": float(loss)}))
