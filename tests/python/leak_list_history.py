# SPDX-License-Identifier: MIT
# Leak: every step's features are appended to a global list.
import torch
from _common import steps

torch.manual_seed(0)
w = torch.randn(128, 512)
history = []


def train_step():
    x = torch.randn(64, 128)
    feat = torch.relu(x @ w)  # LEAK-SITE
    history.append(feat)
    return float(feat.mean())


for _ in steps():
    train_step()
