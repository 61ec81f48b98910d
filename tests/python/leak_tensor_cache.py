# SPDX-License-Identifier: MIT
# Leak: a cache keyed by tensor identity never hits (every batch is a new tensor).
import torch
from _common import steps

torch.manual_seed(0)
w = torch.randn(128, 1024)
_cache = {}


def embed(x):
    hit = _cache.get(x)  # tensors hash by identity: never equal to a new batch
    if hit is None:
        hit = torch.relu(x @ w)  # LEAK-SITE
        _cache[x] = hit
    return hit


for _ in steps():
    embed(torch.randn(64, 128)).sum()
