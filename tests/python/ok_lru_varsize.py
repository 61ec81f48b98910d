# SPDX-License-Identifier: MIT
# Control: a bounded functools.lru_cache(maxsize=64) of tensors whose sizes vary. Once
# full, its live bytes still move up and down as entries of other sizes replace each
# other: a shape a trend test can take for a step leak. The holder explanation sees the
# bounded cache at its bound (docs/python.md), which makes it a plateau.
import functools

import torch
from _common import steps

torch.manual_seed(0)


@functools.lru_cache(maxsize=64)
def features(key):
    g = torch.Generator().manual_seed(key)
    rows = 16 + (key * 7919) % 240
    return torch.randn(rows, 256, generator=g)


for i in steps(min_steps=200):
    features((i * 31) % 600).sum()
