# SPDX-License-Identifier: MIT
"""The workload of bench/pool_replay.sh: a small CNN + MLP trained on CPU with Adam,
under bench/pool_trace.c (LD_PRELOAD), marking each step with lgtrace_step() (or
leakguard_step() under `leakguard run`).
  LG_POOL_STEPS   training steps (default 30)
"""
import ctypes
import os

import torch

torch.manual_seed(0)
torch.set_num_threads(2)
steps = int(os.environ.get("LG_POOL_STEPS", "30"))
mark = lambda: None  # noqa: E731
for name in ("lgtrace_step", "leakguard_step"):  # the tracer's, or leakguard's under `leakguard run`
    try:
        mark = getattr(ctypes.CDLL(None), name)
        break
    except AttributeError:
        pass
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Flatten(), torch.nn.Linear(64 * 8 * 8, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
lossf = torch.nn.CrossEntropyLoss()
x_all = torch.randn(1024, 3, 32, 32)
y_all = torch.randint(0, 10, (1024,))
history = []  # a growing, long-lived store (as a KV cache or metrics kept on device)
for i in range(steps):
    j = (i * 64) % 1024
    x, y = x_all[j:j + 64], y_all[j:j + 64]
    opt.zero_grad(set_to_none=True)
    out = model(x)
    loss = lossf(out, y)
    loss.backward()
    opt.step()
    history.append(out.detach().clone())
    mark()
print("steps", steps, "loss", float(loss))
