# SPDX-License-Identifier: MIT
"""torch_leak.py - PyTorch's CUDA path for scripts/gpu-check.sh (needs a CUDA torch).

    python3 torch_leak.py leak SECONDS      keeps one 1 MiB CUDA tensor per step (LEAK:torch)
    python3 torch_leak.py control SECONDS   the same tensor, dropped each step
Prints "torch_leak: mode=M steps=N allocated=A reserved=R".

Which line the leak is found at. The caching allocator asks the driver for a segment
(cudaMalloc of 2 MiB for blocks up to 1 MiB) when no cached block fits, so a segment is
attributed to whichever tensor allocation found the cache empty, not necessarily the
tensor that is kept. Here the temporary (randn) and the kept tensor (its double) are
made on the same line, and the temporary is freed before the next step's: every
segment this loop makes is made at LEAK:torch, whichever of the two asks. Under
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync every tensor is a cuMemAllocAsync and
the kept one is again made on that line. The check accepts exactly that line.
"""
import sys
import time

import torch

try:
    import leakguard
except ImportError:  # not under leakguard run
    leakguard = None


def main():
    mode, secs = sys.argv[1], float(sys.argv[2])
    dev = torch.device("cuda:0")
    torch.zeros(1, device=dev)  # CUDA's initialisation and the first segment, not at the marked line
    history = []
    end = time.monotonic() + secs
    n = 0
    while time.monotonic() < end:
        y = torch.randn(512, 512, device=dev) * 2  # LEAK:torch (1 MiB of float32 kept, 1 MiB temporary)
        if mode == "leak":
            history.append(y)
        n += 1
        if leakguard:
            leakguard.step()
        time.sleep(0.01)
    torch.cuda.synchronize()
    print("torch_leak: mode=%s steps=%d allocated=%d reserved=%d" % (
        mode, n, torch.cuda.memory_allocated(dev), torch.cuda.memory_reserved(dev)), flush=True)


if __name__ == "__main__":
    main()
