# SPDX-License-Identifier: MIT
# Control: a bounded functools.lru_cache of tensors (fills, then plateaus).
# The cache fills in `maxsize` steps; the loop runs at least 8x as many, so the plateau
# dominates the run even on a slow machine (a bound reached only late in a run cannot
# be told from a leak: docs/detection.md, limits).
import functools

import torch
from _common import steps

torch.manual_seed(0)
w = torch.randn(128, 1024)


@functools.lru_cache(maxsize=8)
def embed(key):
    g = torch.Generator().manual_seed(key)
    return torch.relu(torch.randn(64, 128, generator=g) @ w)


for i in steps(min_steps=64):
    embed(i % 500).sum()
