# SPDX-License-Identifier: MIT
# Control: only detached tensors are kept, and a bounded number of them.
import collections

import torch
from _common import steps

torch.manual_seed(0)
w1 = torch.randn(128, 1024, requires_grad=True)
w2 = torch.randn(1024, 1, requires_grad=True)
ema = torch.zeros(())
recent = collections.deque(maxlen=16)
for _ in steps(pace=0.005):
    x = torch.randn(64, 128)
    y = torch.randn(64, 1)
    h = torch.tanh(x @ w1)
    loss = ((h @ w2 - y) ** 2).mean()
    loss.backward()
    w1.grad = None
    w2.grad = None
    ema = 0.9 * ema + 0.1 * loss.detach()
    recent.append(h.detach())
