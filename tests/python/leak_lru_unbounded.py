# SPDX-License-Identifier: MIT
# Leak: an unbounded functools.lru_cache (maxsize=None) keyed by the step: every entry is
# new, nothing is ever evicted. The holder is the cache of embed.
import functools

import torch
from _common import steps

torch.manual_seed(0)
w = torch.randn(128, 512)


@functools.lru_cache(maxsize=None)
def embed(key):
    g = torch.Generator().manual_seed(key)
    return torch.relu(torch.randn(64, 128, generator=g) @ w)  # LEAK-SITE


for i in steps():
    embed(i).sum()
