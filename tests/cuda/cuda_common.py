#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What the CUDA test cases share (cuda_test.py, cuda_py.py): the recorded GPU sites of
a database, the expectations on one, a recorded run against the stand-in driver."""
import json
import os
import pty
import shutil
import re
import select
import socket
import subprocess
import sys
import time
import urllib.request
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import lgtest  # noqa: E402

KiB = 1024
MiB = 1024 * 1024
CTX_OVERHEAD = 300 * MiB  # the stand-in's per-context device memory seen by NVML


def env_with(args, **kv):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = args.driver_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env.setdefault("LEAKGUARD_NVML", "/nonexistent/libnvidia-ml.so.1")  # no NVML unless a case wants one
    for k, v in kv.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def gpu_sites(db):
    """Every site of a GPU space at the end: dicts with proc, stack, space, device,
    live/alloc bytes/blocks and frames [(function, file, line, module)]."""
    rows = lgtest.db_query(db, """
        SELECT s.proc, s.stack, st.space, c.device, s.live_bytes, s.live_blocks, s.alloc_bytes, s.alloc_blocks
        FROM samples s JOIN stacks st ON st.proc=s.proc AND st.stack=s.stack
        LEFT JOIN cuda_stacks c ON c.proc=s.proc AND c.stack=s.stack
        WHERE s.seq=(SELECT max(seq) FROM samples x WHERE x.proc=s.proc AND x.stack=s.stack)""")
    out = []
    for r in rows:
        frames = lgtest.db_query(db, "SELECT function, file, line, module FROM frames WHERE proc=? AND stack=? "
                                     "ORDER BY idx", (r[0], r[1]))
        out.append(dict(proc=r[0], stack=r[1], space=r[2], device=r[3], live_bytes=r[4], live_blocks=r[5],
                        alloc_bytes=r[6], alloc_blocks=r[7], frames=frames))
    return out


def find_site(t, sites, src, marker, proc=None):
    """The allocation site of the line marked MARKER in SRC: the stacks whose first
    frame is that line, summed (a loop unrolled by the compiler calls from several
    return addresses of one line: several stacks). They must agree on space and
    device."""
    want = t.site(src, marker)
    hits = [s for s in sites if (proc is None or s["proc"] == proc) and s["frames"] and s["frames"][0][1]
            and os.path.basename(s["frames"][0][1]) == os.path.basename(want.path) and s["frames"][0][2] == want.line]
    kinds = {(s["space"], s["device"]) for s in hits}
    t.check(len(hits) >= 1 and len(kinds) == 1, "stacks allocating at %s:%d (%s), one space and device"
            % (os.path.basename(want.path), want.line, marker), found=len(hits), kinds=sorted(kinds, key=str),
            sites=[(s["stack"], s["space"], s["frames"][:3]) for s in sites][:20])
    if not hits:
        return None
    m = dict(hits[0])
    for k in ("live_bytes", "live_blocks", "alloc_bytes", "alloc_blocks"):
        m[k] = sum(s[k] for s in hits)
    m["stacks"] = [s["stack"] for s in hits]
    return m


def expect_site(t, s, what, space="device", device=0, live=None, blocks=None, alloc=None, alloc_blocks=None):
    if s is None:
        return
    got = dict(space=s["space"], device=s["device"], live_bytes=s["live_bytes"], live_blocks=s["live_blocks"],
               alloc_bytes=s["alloc_bytes"], alloc_blocks=s["alloc_blocks"])
    want = dict(space=space, device=device)
    if live is not None:
        want["live_bytes"] = live
    if blocks is not None:
        want["live_blocks"] = blocks
    if alloc is not None:
        want["alloc_bytes"] = alloc
    if alloc_blocks is not None:
        want["alloc_blocks"] = alloc_blocks
    t.check(all(got[k] == v for k, v in want.items()), "%s: %s" % (what, ", ".join(
        "%s %s" % (k, v) for k, v in want.items())), got=got)


def run(t, args, argv, db_name, env=None, expect_rc=0, interval=None, extra=()):
    p = t.lg_run(argv, db=t.path(db_name), env=env or env_with(args), interval=interval, extra=extra)
    t.check(p.returncode == expect_rc, "%s exits %d" % (os.path.basename(argv[0]) + " " + " ".join(argv[1:2]),
                                                         expect_rc),
            exit=p.returncode, stderr=p.stderr[-3000:], stdout=p.stdout[-2000:])
    if not os.path.exists(p.db):
        t.fatal("database written", db=p.db)
    return p


def kv_of(t, p, prefix):
    kv = lgtest.parse_kv(p.stdout, prefix)
    if kv is None:
        t.fatal("the program printed its figures", stdout=p.stdout[-2000:])
    return {k: int(v) if v.lstrip("-").isdigit() else v for k, v in kv.items()}


def devices(db, proc=1):
    """Last cuda_devices row per device of proc, as dicts."""
    cols = [r[1] for r in lgtest.db_query(db, "PRAGMA table_info(cuda_devices)")]
    rows = lgtest.db_query(db, "SELECT * FROM cuda_devices c WHERE proc=? AND seq=(SELECT max(seq) FROM cuda_devices"
                               " y WHERE y.proc=c.proc AND y.device=c.device) ORDER BY device", (proc,))
    return {r[cols.index("device")]: dict(zip(cols, r)) for r in rows}


def space_total(db, space, proc=1):
    rows = lgtest.db_query(db, """
        SELECT coalesce(sum(s.live_bytes), 0) FROM samples s JOIN stacks st ON st.proc=s.proc AND st.stack=s.stack
        WHERE s.proc=? AND st.space=? AND s.seq=(SELECT max(seq) FROM samples x WHERE x.proc=s.proc AND x.stack=s.stack)
        """, (proc, space))
    return rows[0][0]


def alloc_total(db, space="device", proc=1):
    """alloc_bytes summed over every site of SPACE (the final snapshot writes them all,
    symbolized or not)."""
    rows = lgtest.db_query(db, """
        SELECT coalesce(sum(s.alloc_bytes), 0), coalesce(sum(s.alloc_blocks), 0) FROM samples s
        WHERE s.proc=? AND s.seq=(SELECT max(seq) FROM samples x WHERE x.proc=s.proc AND x.stack=s.stack)
        AND s.stack IN (SELECT stack FROM cuda_stacks c WHERE c.proc=s.proc)""", (proc,))
    return rows[0]


def skip(t, why):
    """Exit 77 (ctest: skipped) saying why; only for a missing optional tool."""
    print("SKIP: " + why, flush=True)
    shutil.rmtree(t.tmp, ignore_errors=True)
    sys.exit(77)


def um_rows(db):
    try:
        return {r[0]: r[1:] for r in lgtest.db_query(
            db, "SELECT stack, cpu_page_faults, gpu_page_faults, bytes_htod, bytes_dtoh, thrashing FROM cuda_um")}
    except Exception:  # noqa: BLE001 - no table
        return {}


def scrape(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        body = r.read().decode()
    out = {}
    for line in body.splitlines():
        m = re.match(r'^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$', line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out, body


def nvml_env(t, args):
    f = t.path("nvml.txt")
    return f, env_with(args, LEAKGUARD_NVML=args.fake_nvml, LEAKGUARD_FAKE_NVML=f, LG_STANDIN_NVML_FILE=f,
                       LG_STANDIN_CTX_OVERHEAD=CTX_OVERHEAD)
