#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""liblgpool's site profile keyed by Python lines (issue #16, docs/pool.md), round trip:

  1. `leakguard run` records this script allocating from two lines: a 1 MiB scratch
     buffer dropped at once (young) and 256 KiB blocks kept to the end (old);
  2. `leakguard report --format pool-profile` must give those two lines as
     "<this file>:<line> young|old"; again with the snapshots of the run's last 60 %
     before its exit taken out of the database, as when a loaded machine stalls the
     collector (a CI failure: the kept blocks were called young);
  3. the same lines then allocate from liblgpool.so through its pluggable-allocator
     ABI (ctypes, which releases the GIL around the call as PyTorch does around its
     ops) with that profile: each block must land in its line's generation, read from
     lgpool_stats's bytes in use per generation (reserved less cached); a line not in the profile gets the
     default (middle). Again from another thread.

  py_profile.py --leakguard CLI --lgpool LIB --work DIR        (the test)
  py_profile.py record | replay LIB                             (the two modes)
"""
import argparse
import ctypes
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time

HERE = os.path.abspath(__file__)
MIB = 1 << 20
ALLOC = bytearray


def scratch():
    return ALLOC(1 * MIB)  # SITE-YOUNG


def keeper():
    return ALLOC(256 << 10)  # SITE-OLD


def other():
    return ALLOC(3 * MIB)  # SITE-OTHER


def line_of(tag):
    with open(HERE) as f:
        for i, l in enumerate(f, 1):
            if l.rstrip().endswith("# " + tag):
                return i
    raise SystemExit("no line tagged " + tag)


# The kept blocks: a module global, freed only in the interpreter's finalisation, after
# leakguard's atexit hook has marked the exit (teardown). Kept in record()'s local list,
# they were freed when it returned, before the exit: on a loaded machine the slow
# finalisation let a snapshot see them freed, "0 % kept", and the line came out middle
# (the flake hunt of 2026-12-05).
KEPT = []


def record():
    t_end = time.monotonic() + 1.5
    while time.monotonic() < t_end:
        scratch()
        KEPT.append(keeper())
        time.sleep(0.005)
    print("recorded %d steps" % len(KEPT))


class Stats(ctypes.Structure):  # lg_pool_stats_t (include/leakguard.h)
    _fields_ = [("reserved_bytes", ctypes.c_uint64), ("peak_reserved_bytes", ctypes.c_uint64),
                ("allocated_bytes", ctypes.c_uint64), ("peak_allocated_bytes", ctypes.c_uint64),
                ("requested_bytes", ctypes.c_uint64), ("reserved_gen", ctypes.c_uint64 * 3),
                ("cached_gen", ctypes.c_uint64 * 3), ("rest", ctypes.c_uint64 * 12)]


def replay(lib_path):
    global ALLOC
    lib = ctypes.CDLL(lib_path)  # a CDLL call releases the GIL, as PyTorch's ops do
    proto = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
    # lgpool_alloc(size, device=0, stream=NULL): the defaults are filled in by ctypes
    # in C, so the innermost Python frame at the allocation is the caller's line
    ALLOC = proto(("lgpool_alloc", lib), ((1, "size"), (1, "device", 0), (1, "stream", None)))
    lib.lgpool_stats.argtypes = [ctypes.c_int, ctypes.POINTER(Stats)]

    def in_use():  # bytes in use per generation: reserved less cached
        st = Stats()
        if lib.lgpool_stats(0, ctypes.byref(st)) != 0:
            if not kept:
                return [0, 0, 0]  # the device's pool is made by its first allocation
            raise SystemExit("FAIL: lgpool_stats")
        return [st.reserved_gen[g] - st.cached_gen[g] for g in range(3)]

    names = ("young", "middle", "old")
    kept, bad = [], 0
    for where in ("main thread", "another thread"):
        for fn, size, want in ((scratch, MIB, 0), (keeper, 256 << 10, 2), (other, 3 * MIB, 1)):
            before = in_use()
            if where == "main thread":
                kept.append(fn())
            else:
                th = threading.Thread(target=lambda: kept.append(fn()))
                th.start()
                th.join()
            d = [a - b for a, b in zip(in_use(), before)]
            want_d = [size if g == want else 0 for g in range(3)]
            print("%s, %s(): in use +%s (want +%s in %s)" % (where, fn.__name__, d, size, names[want]))
            bad += d != want_d
    if bad or not all(kept):
        raise SystemExit("FAIL: blocks not in their lines' generations")
    print("ok: each Python line's blocks in its generation")


def profile_rows(leakguard, db):
    out = subprocess.run([leakguard, "report", "--format", "pool-profile", db], stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    rows = {}
    for l in out.splitlines():
        w = l.split("#")[0].split()
        if len(w) == 2:
            rows[w[0]] = w[1]
    return out, rows


def check_rows(out, rows, want, what):
    for k, g in want.items():
        print("profile%s: %s -> %s (want %s)" % (what, k, rows.get(k), g))
        if rows.get(k) != g:
            print(out)
            raise SystemExit("FAIL: the profile%s does not give %s as %s" % (what, k, g))


def stall(db, dst):
    """A copy of db without the snapshots of the last 60 % of the keeping loop before the
    exit (from the first snapshot that shows a kept block). Not 60 % of the whole run: on
    a loaded machine the interpreter's start-up took 0.9 s of a 2.4-s run, and that cut
    took out every snapshot that showed the kept blocks live (seen in the flake hunt)."""
    shutil.copy(db, dst)
    con = sqlite3.connect(dst)
    exit_ns = con.execute("SELECT CAST(value AS INTEGER) FROM labels WHERE key='exit_begin_ns'").fetchone()
    if not exit_ns:
        raise SystemExit("FAIL: no exit_begin_ns label in the recording")
    first = con.execute("SELECT min(s.seq) FROM samples s JOIN frames f ON f.proc = s.proc AND f.stack = s.stack"
                        " WHERE f.idx = 0 AND f.line = ? AND f.file = ? AND s.live_blocks > 0",
                        (line_of("SITE-OLD"), HERE)).fetchone()[0]
    if first is None:
        raise SystemExit("FAIL: no snapshot shows a block of the SITE-OLD line live")
    seqs = [r[0] for r in con.execute("SELECT seq FROM snapshots WHERE t_ns <= ? AND seq >= ? ORDER BY seq",
                                      (exit_ns[0], first))]
    gone = seqs[int(len(seqs) * 0.4):]
    if len(gone) < 3:
        raise SystemExit("FAIL: %d snapshots before the exit, too few" % len(seqs))
    for table in ("snapshots", "samples"):
        con.executemany("DELETE FROM %s WHERE seq=?" % table, [(q,) for q in gone])
    con.commit()
    con.close()
    print("stalled collector: %d of %d snapshots before the exit taken out" % (len(gone), len(seqs)))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "record":
        return record()
    if len(sys.argv) > 2 and sys.argv[1] == "replay":
        return replay(sys.argv[2])
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--lgpool", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    tag = "%d.%d" % sys.version_info[:2]
    db = os.path.join(a.work, "py_profile_%s.db" % tag)
    prof = os.path.join(a.work, "py_profile_%s.txt" % tag)
    for p in (db, prof):
        if os.path.exists(p):
            os.unlink(p)
    r = subprocess.run([a.leakguard, "run", "-q", "-o", db, "--", sys.executable, HERE, "record"])
    if r.returncode != 0:
        raise SystemExit("FAIL: leakguard run exited %d" % r.returncode)
    out, rows = profile_rows(a.leakguard, db)
    with open(prof, "w") as f:
        f.write(out)
    want = {"%s:%d" % (HERE, line_of("SITE-YOUNG")): "young", "%s:%d" % (HERE, line_of("SITE-OLD")): "old"}
    check_rows(out, rows, want, "")
    stalled = os.path.join(a.work, "py_profile_%s_stalled.db" % tag)
    stall(db, stalled)
    check_rows(*profile_rows(a.leakguard, stalled), want, " of the stalled run")
    env = dict(os.environ, LEAKGUARD_POOL_BACKEND="host", LEAKGUARD_POOL_PROFILE=prof,
               LEAKGUARD_POOL_DEFAULT_GEN="middle")
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([sys.executable, HERE, "replay", a.lgpool], env=env)
    if r.returncode != 0:
        raise SystemExit("FAIL: replay exited %d" % r.returncode)
    print("ok: Python-line site profile, recorded and replayed on CPython %s" % tag)


if __name__ == "__main__":
    main()
