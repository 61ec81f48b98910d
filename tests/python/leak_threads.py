# SPDX-License-Identifier: MIT
# Leak from worker threads: two threads append tensors to one global list; the main
# thread does healthy work.
import threading

import torch
from _common import steps

torch.manual_seed(0)
w = torch.randn(128, 512)
results = []
lock = threading.Lock()
stop = threading.Event()


def worker():
    while not stop.is_set():
        x = torch.randn(32, 128)
        out = torch.relu(x @ w)  # LEAK-SITE
        with lock:
            results.append(out)
        stop.wait(0.01)


threads = [threading.Thread(target=worker) for _ in range(2)]
for t in threads:
    t.start()
for _ in steps():
    (torch.randn(64, 128) @ w).sum()
stop.set()
for t in threads:
    t.join()
