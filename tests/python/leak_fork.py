# SPDX-License-Identifier: MIT
# Leak in a forked worker (the DataLoader shape).
#   --mode fork        os.fork(): the child leaks, then exits through sys.exit
#   --mode dataloader  torch DataLoader(num_workers=1): the dataset leaks in the worker
import os
import sys

import torch
from _common import SECONDS, steps

torch.manual_seed(0)
w = torch.randn(128, 512)
mode = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "fork"
seen = []


class Leaky(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        x = torch.randn(64, 128)
        feat = torch.relu(x @ w)  # LEAK-SITE
        seen.append(feat)
        return feat.mean()


if mode == "fork":
    pid = os.fork()
    if pid == 0:
        ds = Leaky()
        for i in steps():
            ds[i]
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
else:
    import time
    loader = torch.utils.data.DataLoader(Leaky(), batch_size=1, num_workers=1)
    t_end = time.monotonic() + SECONDS
    for i, b in enumerate(loader):
        time.sleep(0.01)
        if i > 40 and time.monotonic() > t_end:
            break
    del loader
