# SPDX-License-Identifier: MIT
# Leak: a training function keeps every step's activations in a list of its own locals.
# At exit the function has returned, so only an explanation made while it runs can name
# the holder: the collector asks for one when it first flags the site.
import torch
from _common import steps

torch.manual_seed(0)


def train():
    w = torch.randn(256, 256)
    activations = []
    for _ in steps(pace=0.01):
        h = torch.tanh(torch.randn(64, 256) @ w)  # LEAK-SITE
        activations.append(h)
    return len(activations)


print("leak_local_list: steps=%d" % train())
