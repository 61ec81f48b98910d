# SPDX-License-Identifier: MIT
# Control: the last 32 batches' activations in a collections.deque(maxlen=32): fills,
# then each append drops the oldest.
import collections

import torch
from _common import steps

torch.manual_seed(0)
w = torch.randn(128, 512)
recent = collections.deque(maxlen=32)
for _ in steps(min_steps=256):
    recent.append(torch.relu(torch.randn(64, 128) @ w))
