# SPDX-License-Identifier: MIT
"""Benchmark workload: a small MLP trained on CPU (about 10 s bare on 2 cores).

Prints `import_s` and `loop_s` (the training loop alone) on one JSON line.
  LG_MLP_STEPS   training steps (default 150; Debian's CPU torch: ~70 ms a step here)
"""
import json
import os
import time

t0 = time.monotonic()
import torch  # noqa: E402

t1 = time.monotonic()
torch.manual_seed(0)
torch.set_num_threads(int(os.environ.get("LG_MLP_THREADS", "2")))
steps = int(os.environ.get("LG_MLP_STEPS", "150"))
model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
lossf = torch.nn.CrossEntropyLoss()
try:
    import leakguard
    step = leakguard.step if leakguard.recording() else (lambda: None)
except ImportError:
    step = lambda: None  # noqa: E731
x_all = torch.randn(4096, 256)
y_all = torch.randint(0, 10, (4096,))
total = 0.0
for i in range(steps):
    j = (i * 128) % 4096
    x, y = x_all[j:j + 128], y_all[j:j + 128]
    opt.zero_grad(set_to_none=True)
    loss = lossf(model(x), y)
    loss.backward()
    opt.step()
    total += loss.item()
    step()
t2 = time.monotonic()
print(json.dumps({"import_s": round(t1 - t0, 3), "loop_s": round(t2 - t1, 3), "steps": steps,
                  "loss": round(total / steps, 4)}))
