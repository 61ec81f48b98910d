# SPDX-License-Identifier: MIT
# Control: a collections.deque(maxlen=48) of the last batches' activations, whose batch
# length drifts up as the run goes on (longer sequences later in an epoch). Once full,
# the deque holds 48 entries whatever happens, but its bytes creep up as bigger entries
# push out smaller ones: a curve a trend test takes for a leak. The holder explanation
# sees the deque at its maxlen, which makes the site a plateau (docs/detection.md).
import collections

import torch
from _common import steps

torch.manual_seed(0)
w = torch.randn(64, 256)
recent = collections.deque(maxlen=48)
for i in steps(min_steps=200):
    rows = 16 + (i // 4) % 512
    recent.append(torch.relu(torch.randn(rows, 64) @ w))  # LEAK-SITE (not a leak: bounded)
