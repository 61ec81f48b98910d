# SPDX-License-Identifier: MIT
# Leak with a fixed set of keys: each of 16 users' history tensor is replaced by a longer
# one every step (d[k] = cat(d[k], x)). The dict's length never changes, but its values
# keep getting bigger: not a bounded dict (the holder-aware verdict must not hide it).
import torch
from _common import steps

torch.manual_seed(0)
history = {u: torch.zeros(0, 256) for u in range(16)}

for i in steps():
    u = i % 16
    history[u] = torch.cat([history[u], torch.randn(8, 256)])  # LEAK-SITE
