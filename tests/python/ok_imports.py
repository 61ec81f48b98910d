# SPDX-License-Identifier: MIT
"""Control: a script that imports torch and the packages a training script brings in,
then exits: `python3 -c "import torch"` grows a process by 60-90 MiB in about 800 sites,
for the whole run. A module's start-up, not a leak (docs/detection.md, "Start-up")."""
import importlib

import torch  # noqa: F401

for name in ["torch.nn", "torch.optim", "torch.utils.data", "torch.distributed", "torch.autograd",
             "torch.fx", "torch.jit", "numpy", "json", "multiprocessing.pool"]:
    try:
        importlib.import_module(name)
    except Exception:
        pass
