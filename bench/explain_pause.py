#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How long leakguard.explain() holds the program's Python threads (issue #10: live
explanations must not stop a job for long; target <= 50 ms at 10 000 tracked objects).

Run under `leakguard run` (bench/explain_pause.sh does): builds N tracked objects that a
module global holds (dicts and lists, each a malloc block), plus a leaking list of
bytearrays that is the explained site, then times explain() of that site REPS times
and prints one line per N: median and max milliseconds. The interpreter's own objects
(about 60 000 after startup in Debian's python3.11) are walked too: they are part of
every real pause.
"""
import gc
import statistics
import sys
import time

import leakguard

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
SIZES = [int(x) for x in sys.argv[2:]] or [10000, 100000]

kept = []
world = []


def leak(n):
    for _ in range(n):
        kept.append(bytearray(2048))  # the explained site


for n in SIZES:
    del world[:]
    world.extend({"i": i, "v": [i, i + 1]} for i in range(n // 3))
    leak(500)
    leakguard.step()
    time.sleep(0.3)  # the collector stores the site's stack
    site = leakguard._site_of_object(kept[-1])
    gc.collect()
    times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        r = leakguard.explain(stacks=[site] if site else None, write=False)
        times.append((time.perf_counter() - t0) * 1000)
        holders = len(r.get("holders", [])) if isinstance(r, dict) else 0
    tracked = len(gc.get_objects())
    print("explain_pause: extra_objects=%d gc_tracked=%d median_ms=%.1f max_ms=%.1f holders=%d" %
          (n, tracked, statistics.median(times), max(times), holders), flush=True)
