# SPDX-License-Identifier: MIT
# A long-running PyTorch leak for bench/holders_under_load.py: an MLP whose forward()
# keeps every step's activation in a global list (a "debug" list nobody clears).
import sys
import time

import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(256, 512)
        self.l2 = nn.Linear(512, 10)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        ACTIVATIONS.append(h)  # kept forever
        return self.l2(h)


ACTIVATIONS = []
torch.manual_seed(0)
model = MLP()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
end = time.monotonic() + float(sys.argv[1] if len(sys.argv) > 1 else 27)
steps = 0
while time.monotonic() < end:
    x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    steps += 1
    time.sleep(0.005)
print("steps", steps)
