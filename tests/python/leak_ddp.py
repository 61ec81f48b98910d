# SPDX-License-Identifier: MIT
# Leak in one rank of a 2-process DistributedDataParallel job (torch.multiprocessing +
# gloo, CPU): rank 1 keeps every step's loss tensor (and its graph) in a list; rank 0 is
# healthy. The report must say which rank leaks.
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import SECONDS, leakguard  # noqa: E402

# Every rank runs the same number of steps (a collective per step: a time-based loop
# could end one rank a step early and leave the other waiting in its allreduce).
STEPS = int(SECONDS * 40)


def worker(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(256, 256))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for _ in range(STEPS):
        opt.zero_grad()
        out = model(torch.randn(64, 256))
        loss = out.pow(2).mean()
        loss.backward()
        opt.step()
        if rank == 1:
            kept.append(torch.relu(out.detach() * 2))  # LEAK-SITE
        if leakguard is not None:
            leakguard.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    port = 29500 + os.getpid() % 1000
    mp.spawn(worker, args=(2, port), nprocs=2, join=True)
    print("leak_ddp: seconds=%g" % SECONDS)
