# SPDX-License-Identifier: MIT
"""Records a memory cgroup's usage at 10 Hz while guard_mem runs in it (no guard),
for the level unit tests (tests/guard/data/*.csv: "t,usage,limit").

  record_series.py --mem GUARD_MEM --out FILE --limit-mib 256 --seconds 4 -- leak 150
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guardtest as gt  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--mem", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--limit-mib", type=int, default=256)
ap.add_argument("--seconds", type=float, default=4)
ap.add_argument("args", nargs="+")
a = ap.parse_args()
with gt.Cgroup(a.limit_mib << 20) as cg:
    usage = os.path.join(cg.path, "memory.current" if cg.version == 2 else "memory.usage_in_bytes")
    p = cg.spawn([a.mem] + a.args)
    gt.wait_line(p, "ready")
    t0 = time.monotonic()
    rows = []
    while time.monotonic() - t0 < a.seconds:
        try:
            with open(usage) as f:
                rows.append((time.monotonic() - t0, int(f.read())))
        except OSError:
            break
        if p.poll() is not None:
            break
        time.sleep(0.1)
    with open(a.out, "w") as f:
        f.write("# %s in a %d MiB cgroup v%d, sampled every 100 ms; exit %s\n"
                % (" ".join(a.args), a.limit_mib, cg.version, p.poll()))
        for t, u in rows:
            f.write("%.3f,%d,%d\n" % (t, u, a.limit_mib << 20))
