# SPDX-License-Identifier: MIT
"""py_cuda.py - the Python module's GPU side on the stand-in driver (tests only).

    python3 py_cuda.py holders SECONDS   device memory allocated from Python (ctypes,
                                         cuMemAlloc_v2) held by "CUDA tensors" in a
                                         list that never shrinks (# LEAK-SITE)
    python3 py_cuda.py gc                the gc_triggered_without_cuda_cleanup_count rule
    python3 py_cuda.py torchstats GATE   torch.cuda.memory_allocated/reserved (faked: this
                                         torch has no CUDA) recorded per device
    python3 py_cuda.py storages SECONDS  device memory held by storages kept directly: a
                                         torch.UntypedStorage list (# LEAK-UNTYPED) and a
                                         torch.TypedStorage list (# LEAK-TYPED)

There is no CUDA build of PyTorch here: a torch.Tensor subclass reports device
"cuda" and a storage whose data_ptr() is the device address the stand-in driver
returned, which is all the holder explanation reads of a CUDA tensor. For the gc rule,
leakguard._cuda_probe stands in for torch.cuda.memory_allocated/memory_reserved.
Prints "py_cuda: mode=M k=v ...".
"""
import ctypes
import gc
import os
import sys
import time

import leakguard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from _common import process_age  # noqa: E402 (tests/python/_common.py)

MiB = 1 << 20

kv_cache = []  # a module global: still there when the exit-time explain runs


def holders(secs):
    import torch

    cu = ctypes.CDLL("libcuda.so.1")
    ctx = ctypes.c_void_p()
    assert cu.cuInit(0) == 0 and cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0) == 0

    class FakeDevice:
        type = "cuda"
        index = 0

    class DeviceStorage:
        def __init__(self, ptr, n):
            self.ptr, self.n = ptr, n

        def data_ptr(self):
            return self.ptr

        def nbytes(self):
            return self.n

    class CudaTensor(torch.Tensor):
        @property
        def device(self):
            return FakeDevice()

        def storage(self):
            return self._lg_storage

        untyped_storage = storage

    def device_alloc(n):
        d = ctypes.c_uint64()
        rc = cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(n))  # LEAK-SITE
        assert rc == 0, rc
        return d.value

    # at least as long as the process took to get here (`import torch` takes 1 s on a
    # quiet machine, 8 s beside a busy ASan collector): the leak is most of the run
    end = time.monotonic() + max(secs, process_age())
    steps = 0
    while time.monotonic() < end:
        t = torch.empty(0).as_subclass(CudaTensor)
        t._lg_storage = DeviceStorage(device_alloc(MiB), MiB)
        kv_cache.append(t)
        steps += 1
        leakguard.step()
        time.sleep(0.02)
    mem = leakguard.cuda_memory()
    d0 = mem["devices"].get(0, {})
    print("py_cuda: mode=holders steps=%d device_bytes=%d total=%d torch_cuda=%d" % (
        steps, d0.get("device_bytes", -1), d0.get("total_bytes", -1), mem["torch_cuda"]), flush=True)


def gc_rule():
    state = {"allocated": 100 * MiB, "reserved": 200 * MiB}
    leakguard._cuda_probe = lambda: (state["allocated"], state["reserved"])

    class Holder:
        """Stands for an object holding a CUDA tensor: freeing it lowers "allocated"."""

        def __init__(self, frees_reserved):
            self.other = None
            self.frees_reserved = frees_reserved

        def __del__(self):
            state["allocated"] -= MiB
            if self.frees_reserved:
                state["reserved"] -= 2 * MiB

    def cycle(frees_reserved):
        a, b = Holder(frees_reserved), Holder(frees_reserved)
        a.other, b.other = b, a

    gc.collect()
    base = leakguard.cuda_memory()["gc_triggered_without_cuda_cleanup_count"]
    cycle(False)
    gc.collect()  # freed holders, the allocator kept its reserve: counted
    one = leakguard.cuda_memory()["gc_triggered_without_cuda_cleanup_count"] - base
    cycle(True)
    gc.collect()  # the allocator gave memory back: not counted
    gc.collect()  # nothing collected: not counted
    two = leakguard.cuda_memory()["gc_triggered_without_cuda_cleanup_count"] - base
    print("py_cuda: mode=gc after_first=%d after_all=%d" % (one, two), flush=True)


def device_context():
    cu = ctypes.CDLL("libcuda.so.1")
    ctx = ctypes.c_void_p()
    assert cu.cuInit(0) == 0 and cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0) == 0
    return cu


def torchstats(gate):
    """torch.cuda's figures, faked, in three states: 64 MiB allocated of a 96 MiB
    reserve, then 96 MiB of 160 MiB (the peak reserve), then empty_cache() gives 32 MiB
    back (96 MiB of 128 MiB) and the program exits. Each of the first two is held until
    the test has seen it in the database (the file GATE.1, GATE.2 exists): no timing."""
    import torch

    cu = device_context()
    d = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(4 * MiB)) == 0  # CUDA in use
    state = {"allocated": 64 * MiB, "reserved": 96 * MiB}
    torch.cuda.device_count = lambda: 1
    torch.cuda.memory_allocated = lambda device=None: state["allocated"]
    torch.cuda.memory_reserved = lambda device=None: state["reserved"]
    torch.cuda.is_initialized = lambda: True  # last: the watcher's reads start here
    for n, (a, r) in enumerate(((64 * MiB, 96 * MiB), (96 * MiB, 160 * MiB)), 1):
        state["allocated"], state["reserved"] = a, r
        end = time.monotonic() + 60
        while not os.path.exists("%s.%d" % (gate, n)) and time.monotonic() < end:
            leakguard.step()
            time.sleep(0.01)  # the watcher's reads run between bytecodes
    state["reserved"] = 128 * MiB  # empty_cache() gave 32 MiB back
    mem = leakguard.cuda_memory()["devices"].get(0, {})
    print("py_cuda: mode=torchstats allocated=%d reserved=%d peak_reserved=%d seen_allocated=%d" % (
        state["allocated"], state["reserved"], 160 * MiB, mem.get("torch_allocated_bytes", -1)), flush=True)


storage_cache = []  # module globals: still there when the exit-time explain runs
typed_cache = []


def storages(secs):
    import torch

    cu = device_context()

    class FakeDevice:
        type = "cuda"
        index = 0

    class CudaStorage(torch.UntypedStorage):
        @property
        def device(self):
            return FakeDevice()

        def data_ptr(self):
            return self._lg_ptr

        def nbytes(self):
            return self._lg_n

    class CudaTypedStorage(torch.TypedStorage):
        device = CudaStorage.device
        data_ptr = CudaStorage.data_ptr
        nbytes = CudaStorage.nbytes

    end = time.monotonic() + max(secs, process_age())
    steps = 0
    while time.monotonic() < end:
        u, d = CudaStorage(0), ctypes.c_uint64()
        assert cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(MiB)) == 0  # LEAK-UNTYPED
        u._lg_ptr, u._lg_n = d.value, MiB
        storage_cache.append(u)
        t, d = torch.TypedStorage(0, dtype=torch.float32), ctypes.c_uint64()
        t.__class__ = CudaTypedStorage  # (torch 1.13 makes no TypedStorage subclass otherwise)
        assert cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(MiB // 2)) == 0  # LEAK-TYPED
        t._lg_ptr, t._lg_n = d.value, MiB // 2
        typed_cache.append(t)
        steps += 1
        leakguard.step()
        time.sleep(0.02)
    print("py_cuda: mode=storages steps=%d" % steps, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "holders":
        holders(float(sys.argv[2]))
    elif sys.argv[1] == "torchstats":
        torchstats(sys.argv[2])
    elif sys.argv[1] == "storages":
        storages(float(sys.argv[2]))
    else:
        gc_rule()
