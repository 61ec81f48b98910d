# SPDX-License-Identifier: MIT
"""Shared by the scenario scripts: optional leakguard step markers, a paced loop."""
import os
import time

try:
    import leakguard
except ImportError:  # run bare: no step markers
    leakguard = None

SECONDS = float(os.environ.get("LG_PY_SECONDS", "4"))


def steps(min_steps=40, pace=0.01):
    """Yields step numbers for about SECONDS (at least min_steps), marking each step."""
    t_end = time.monotonic() + SECONDS
    i = 0
    while i < min_steps or time.monotonic() < t_end:
        yield i
        if leakguard is not None:
            leakguard.step()
        if pace:
            time.sleep(pace)
        i += 1
