# SPDX-License-Identifier: MIT
# Leak, then the script dies: --exit raise (an uncaught exception) or --exit _exit
# (os._exit: no atexit handlers, no interpreter teardown).
import os
import sys

import torch
from _common import steps

torch.manual_seed(0)
w = torch.randn(128, 512)
history = []
how = sys.argv[sys.argv.index("--exit") + 1] if "--exit" in sys.argv else "raise"
for _ in steps():
    history.append(torch.relu(torch.randn(64, 128) @ w))  # LEAK-SITE
if how == "_exit":
    sys.stdout.flush()
    os._exit(3)
raise RuntimeError("leak_raise: dying on purpose")
