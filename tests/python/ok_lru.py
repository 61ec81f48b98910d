# SPDX-License-Identifier: MIT
# Control: a bounded functools.lru_cache of tensors (fills, then plateaus).
import functools

import torch
from _common import steps

torch.manual_seed(0)
w = torch.randn(128, 1024)


@functools.lru_cache(maxsize=32)
def embed(key):
    g = torch.Generator().manual_seed(key)
    return torch.relu(torch.randn(64, 128, generator=g) @ w)


for i in steps():
    embed(i % 500).sum()
