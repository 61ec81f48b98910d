# SPDX-License-Identifier: MIT
# Control: the running loss is accumulated as a Python float (loss.item()).
import torch
from _common import steps

torch.manual_seed(0)
w1 = torch.randn(128, 1024, requires_grad=True)
w2 = torch.randn(1024, 1, requires_grad=True)
total_loss = 0.0
for _ in steps(pace=0.005):
    x = torch.randn(64, 128)
    y = torch.randn(64, 1)
    loss = ((torch.tanh(x @ w1) @ w2 - y) ** 2).mean()
    loss.backward()
    w1.grad = None
    w2.grad = None
    total_loss += loss.item()
