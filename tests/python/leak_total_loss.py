# SPDX-License-Identifier: MIT
# Leak: `total_loss += loss` keeps every step's autograd graph alive.
#   (default)   no backward(): the graph keeps the saved activations (hundreds of KiB
#               per step, allocated where the activation is computed)
#   --backward  backward() each step: the saved tensors are freed but the graph's
#               nodes stay chained to total_loss: a few hundred bytes per op, so a
#               model of 24 layers keeps some 20 KiB per step (a real model's graph of
#               thousands of ops keeps more)
import sys

import torch
from _common import steps

torch.manual_seed(0)
backward = "--backward" in sys.argv
w1 = torch.randn(128, 1024, requires_grad=True)
w2 = torch.randn(1024, 1, requires_grad=True)
layers = [torch.randn(16, 16, requires_grad=True) for _ in range(24 if backward else 0)]
total_loss = 0


def train_step():
    global total_loss
    x = torch.randn(64, 128)
    y = torch.randn(64, 1)
    h = torch.tanh(x @ w1)  # LEAK-SITE
    z = h[:, :16]
    for w in layers:
        z = torch.tanh(z @ w)  # LEAK-NODES
    loss = ((h @ w2 - y) ** 2).mean() + z.mean()  # LEAK-NODES
    if backward:
        loss.backward()
        w1.grad = None
        w2.grad = None
        for w in layers:
            w.grad = None
    total_loss += loss  # LEAK-HOLDER


for _ in steps(pace=0.005 if backward else 0.01):
    train_step()
