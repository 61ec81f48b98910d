# SPDX-License-Identifier: MIT
"""Micro-benchmark (issue #12): the recorder's Python frame reader, per CPython version.

  python3.X bench/py_frames.py BUILD/lib/liblg_pyframes_probe.so [DEPTH]

Run by bench/py_frames.sh under every interpreter. At DEPTH Python frames (default 12)
it calls, through ctypes (GIL released, as inside malloc), src/capture/python.c's
reader and, in the same run, two baselines: malloc(64)+free, and unw_backtrace of the
same native stack (what recording this allocation's stack natively costs without the
recorder's stack cache). Prints one JSON line: nanoseconds per call, the best of 15
runs (the CPU cost without interference from other processes on a shared machine).
"""
import ctypes
import json
import sys

lib = ctypes.CDLL(sys.argv[1])
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 12
lib.lgt_bench.restype = ctypes.c_double
lib.lgt_bench.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.POINTER(ctypes.c_int)]
if not lib.lgt_init():
    sys.exit("the reader does not accept this CPython")

WHAT = {"read_warm": (0, 200000), "read_cold": (1, 20000), "malloc_free": (2, 1000000),
        "unwind": (3, 20000)}


def measure():
    out, nf = {}, ctypes.c_int(0)
    for name, (what, iters) in WHAT.items():
        runs = []
        for _ in range(15):
            runs.append(lib.lgt_bench(what, iters, ctypes.byref(nf)))
        out[name] = round(min(runs), 1)
    out["frames"] = nf.value
    return out


def nest(n):
    return nest(n - 1) if n > 1 else measure()


r = nest(depth - 2)  # + measure() + this <module> frame = depth
r["python"] = sys.version.split()[0]
print(json.dumps(r))
