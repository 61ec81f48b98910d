# SPDX-License-Identifier: MIT
# Leak: a model keeps every batch's output in an attribute ("for debugging"), so the
# holder is the model object: __main__.model (Net) → .seen (list).
import torch
from _common import steps

torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(128, 512)
        self.seen = []

    def forward(self, x):
        out = torch.relu(self.fc(x))  # LEAK-SITE
        self.seen.append(out.detach())
        return out


model = Net()
for _ in steps():
    with torch.no_grad():
        model(torch.randn(64, 128)).sum()
