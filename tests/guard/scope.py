# SPDX-License-Identifier: MIT
"""A run's guard keeps to its run: `leakguard run --guard` (and --guard-dry-run) grades
its levels on system memory and the cgroup too, but tells only its own processes. A
process of another run, whose region holds a level some other guard published, keeps
that level and its sequence while the second run's guard scans (every second) and ends.

Before the fix the second run's guard was in system mode: it found every region on the
machine and wrote its own level (normal) into each at discovery, dry run or not (seen
as guard_publish failing beside cuda_metrics' `run --guard-dry-run`).

  scope.py --leakguard BIN --mem GUARD_MEM
"""
import argparse
import mmap
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guardtest as gt  # noqa: E402
from publish import OFF_LEVEL, region_path  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--mem", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lgguard-scope-")
    fails = []
    run = subprocess.Popen([os.path.abspath(a.leakguard), "run", "-q", "-o", os.path.join(tmp, "a.db"), "--",
                            os.path.abspath(a.mem), "hold", "8"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp)
    try:
        gt.wait_line(run, "ready")
        target = path = None
        for d in gt.children(run.pid):
            target, path = d, region_path(d)
        if not path:
            print("SKIP: no recorded process with a region found")
            return gt.SKIP
        # the level some guard published into the first run's process: emergency, seq 77
        with open(path, "r+b") as f:
            m = mmap.mmap(f.fileno(), 4096)
            struct.pack_into("<IQ", m, OFF_LEVEL, 3, 77)
            for extra in (["--guard"], ["--guard-dry-run"]):
                p = subprocess.run([os.path.abspath(a.leakguard), "run", "-q", "-o",
                                    os.path.join(tmp, "b%d.db" % len(extra[0])), "-i", "0.1"] + extra +
                                   ["--", "/bin/sleep", "2.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, cwd=tmp, timeout=60)
                lvl, seq = struct.unpack_from("<IQ", m, OFF_LEVEL)
                print("%s: second run exit %d; first run's process %d: level %d, seq %d"
                      % (extra[0], p.returncode, target, lvl, seq))
                if p.returncode != 0:
                    fails.append("run %s -- sleep 2.5 exited %d: %s" % (extra[0], p.returncode, p.stderr[-500:]))
                if (lvl, seq) != (3, 77):
                    fails.append("run %s wrote into another run's process: level %d seq %d (was 3, 77)"
                                 % (extra[0], lvl, seq))
            m.close()
    finally:
        gt.stop(run)
    for f in fails:
        print("FAIL: " + f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
