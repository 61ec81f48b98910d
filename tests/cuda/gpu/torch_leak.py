# SPDX-License-Identifier: MIT
"""torch_leak.py - PyTorch's CUDA path for scripts/gpu-check.sh (needs a CUDA torch).

    python3 torch_leak.py leak SECONDS      keeps one 1 MiB CUDA tensor per step (made at LEAK:torch)
    python3 torch_leak.py control SECONDS   the same tensor, dropped each step
Prints "torch_leak: mode=M steps=N allocated=A reserved=R".
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
    history = []
    end = time.monotonic() + secs
    n = 0
    while time.monotonic() < end:
        x = torch.randn(512, 512, device=dev)  # 1 MiB of float32
        y = x * 2  # LEAK:torch
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
