# SPDX-License-Identifier: MIT
# Leak: a model's outputs kept in a global list. The innermost Python line of each
# allocation is torch's own (Linear.forward in torch/nn/modules/linear.py): the site
# must be this script's line that called the model.
import torch
from _common import steps

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
outputs = []


def train_step():
    x = torch.randn(64, 128)
    with torch.no_grad():
        y = model(x)  # LEAK-SITE
    outputs.append(y)  # LEAK-KEPT
    return float(y.mean())


for _ in steps():
    train_step()
