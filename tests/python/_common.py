# SPDX-License-Identifier: MIT
"""Shared by the scenario scripts: optional leakguard step markers, a paced loop."""
import os
import time

try:
    import leakguard
except ImportError:  # run bare: no step markers
    leakguard = None

SECONDS = float(os.environ.get("LG_PY_SECONDS", "4"))


def process_age():
    """Seconds since this process started (/proc/self/stat), 0 if unknown."""
    try:
        with open("/proc/self/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return max(0.0, up - start / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def steps(min_steps=40, pace=0.01):
    """Yields step numbers for about SECONDS (at least min_steps), marking each step,
    and for at least as long as the process took to get here (interpreter start-up and
    `import torch`: 1 s on a quiet machine, 8 s on a busy one), so that the loop is
    most of the run however slow the start was: a verdict must not depend on a quiet
    machine."""
    t_end = time.monotonic() + max(SECONDS, process_age())
    i = 0
    while i < min_steps or time.monotonic() < t_end:
        yield i
        if leakguard is not None:
            leakguard.step()
        if pace:
            time.sleep(pace)
        i += 1
