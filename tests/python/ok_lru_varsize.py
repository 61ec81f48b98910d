# SPDX-License-Identifier: MIT
# Control: a bounded functools.lru_cache(maxsize=64) of tensors whose sizes vary and drift
# up as the run goes on (longer sequences later in an epoch). Once full, the cache holds 64
# entries whatever happens, but its bytes still creep up as bigger entries replace
# smaller ones: a curve a trend test takes for a step leak. The holder explanation sees
# the lru_cache at its maxsize, which makes the site a plateau (docs/detection.md).
import functools

import torch
from _common import steps

torch.manual_seed(0)


@functools.lru_cache(maxsize=64)
def features(key, rows):
    g = torch.Generator().manual_seed(key)
    return torch.randn(rows, 256, generator=g)


for i in steps(min_steps=200):
    rows = 16 + (i // 4) % 512  # LEAK-SITE (not a leak: the cache is bounded)
    features(i % 97, rows).sum()
