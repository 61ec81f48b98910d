#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`leakguard report --format pprof`: the profile of a leaking C program (late_leak)
and of a leaking Python program (pure_sessions.py), decoded here (gzip, protobuf wire
format) and read by Go's pprof (`go tool pprof`, Debian's golang-go, installed by
scripts/deps.sh). Exact: the inuse_space samples sum to the live bytes the database
holds at the end; the growth samples sum to the report's leaking sites' rates; the
fastest grower is the LEAK-SITE line (C) and the Python line (Python), with the
native frames under the Python line leaf first; every native location points at the
mapping of its module's file (its address inside), Python frames at none. Errors:
binary output to a terminal, an output file that cannot be written, a missing,
truncated, foreign (not leakguard's) database or one from a future schema."""
import gzip
import json
import os
import pty
import shutil
import sqlite3
import subprocess
import sys

import lgtest

TYPES = ["growth_space_per_second", "peak_inuse_space", "inuse_space", "inuse_objects", "alloc_space",
         "alloc_objects"]
PY_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def fields(b):
    """(field, wire type, value) of one protobuf message: ints for varints, bytes for
    length-delimited fields."""
    i, out = 0, []
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % w)
        out.append((f, w, v))
    return out


def packed(b):
    i, out = 0, []
    while i < len(b):
        v, i = varint(b, i)
        out.append(v - (1 << 64) if v >= 1 << 63 else v)
    return out


def decode(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    prof = fields(raw)
    strings = [v.decode() for f, w, v in prof if f == 6]
    stype = []
    for f, w, v in prof:
        if f == 1:
            d = dict((ff, vv) for ff, ww, vv in fields(v))
            stype.append((strings[d.get(1, 0)], strings[d.get(2, 0)]))
    funcs, locs, samples = {}, {}, []
    for f, w, v in prof:
        if f == 5:
            d = dict((ff, vv) for ff, ww, vv in fields(v))
            funcs[d.get(1, 0)] = (strings[d.get(2, 0)], strings[d.get(4, 0)])
    for f, w, v in prof:
        if f == 4:
            d = fields(v)
            lid = next((vv for ff, ww, vv in d if ff == 1), 0)
            lines = [dict((a, c) for a, _, c in fields(vv)) for ff, ww, vv in d if ff == 4]
            fn, file = funcs[lines[0].get(1, 0)] if lines else ("?", "")
            locs[lid] = (fn, file, lines[0].get(2, 0) if lines else 0)
    for f, w, v in prof:
        if f == 2:
            d = fields(v)
            ids = [x for ff, ww, vv in d if ff == 1 for x in (packed(vv) if ww == 2 else [vv])]
            vals = [x for ff, ww, vv in d if ff == 2 for x in (packed(vv) if ww == 2 else [vv])]
            samples.append(([locs[x] for x in ids], vals))
    return stype, samples


def default_type(path):
    """The profile's default_sample_type (field 14), "" when it has none."""
    with gzip.open(path, "rb") as f:
        prof = fields(f.read())
    strings = [v.decode() for f, w, v in prof if f == 6]
    return next((strings[v] for f, w, v in prof if f == 14), "")


def decode_mappings(path):
    """The profile's Locations {id: (mapping_id, address, function, file)} and Mappings
    {id: (memory_start, memory_limit, filename)}."""
    with gzip.open(path, "rb") as f:
        prof = fields(f.read())
    strings = [v.decode() for f, w, v in prof if f == 6]
    maps, funcs, locs = {}, {}, {}
    for f, w, v in prof:
        d = dict((ff, vv) for ff, ww, vv in fields(v)) if w == 2 and f in (3, 4, 5) else {}
        if f == 3:
            maps[d.get(1, 0)] = (d.get(2, 0), d.get(3, 0), strings[d.get(5, 0)])
        elif f == 5:
            funcs[d.get(1, 0)] = (strings[d.get(2, 0)], strings[d.get(4, 0)])
    for f, w, v in prof:
        if f == 4:
            d = fields(v)
            one = dict((ff, vv) for ff, ww, vv in d if ff != 4)
            lines = [dict((a, c) for a, _, c in fields(vv)) for ff, ww, vv in d if ff == 4]
            fn, file = funcs[lines[0].get(1, 0)] if lines else ("?", "")
            locs[one.get(1, 0)] = (one.get(2, 0), one.get(3, 0), fn, file)
    return locs, maps


def check_mappings(t, prof, db, what, want_python):
    """Every native Location points at the Mapping of its module (the file the database's
    modules table names for it, its address inside), Python frames at none."""
    locs, maps = decode_mappings(prof)
    con = sqlite3.connect(db)
    mods = {}  # ip -> the modules the database's locations give it
    for ip, mod in con.execute("SELECT ip, module FROM locations"):
        mods.setdefault(ip & ((1 << 64) - 1), set()).add(mod or "")
    paths = set(p for (p,) in con.execute("SELECT path FROM modules"))
    con.close()
    native, python, wrong, pywrong = 0, 0, [], []
    for lid, (mid, addr, fn, file) in sorted(locs.items()):
        m = mods.get(addr, set())
        if m == {"python"}:
            python += 1
            if mid != 0:
                pywrong.append((lid, fn, file, "mapping %d" % mid))
            continue
        if len(m) != 1 or "" in m:
            continue  # no module resolved (the vdso, a JIT): nothing to point at
        mod = next(iter(m))
        native += 1
        mp = maps.get(mid)
        if mid == 0 or mp is None:
            wrong.append((lid, fn, mod, "mapping id %d" % mid))
        elif os.path.basename(mp[2]) != mod or mp[2] not in paths or not mp[0] <= addr < mp[1]:
            wrong.append((lid, fn, mod, "mapping %d is %s [%#x, %#x), address %#x" % (mid, mp[2], mp[0], mp[1], addr)))
    t.check(native >= 5 and not wrong,
            "%s: every native Location (%d) points at the Mapping of its module's file, its address inside"
            % (what, native), wrong=wrong[:8], mappings=sorted(maps.values())[:8])
    if want_python:
        t.check(python > 0 and not pywrong, "%s: Python frames (%d) have no mapping" % (what, python), wrong=pywrong[:8])


def main():
    a = lgtest.parse_args()
    t = lgtest.Test("pprof", a)
    go = shutil.which("go")
    t.check(go is not None, "go is installed (scripts/deps.sh installs golang-go)")
    site = t.site("late_leak.c")
    rec = t.fx.run("c", lambda: t.lg_run([t.bin("late_leak"), "--seconds", "5", "--start", "1"], db=t.path("c.db")))
    t.check(rec.returncode == 0, "recorded late_leak", stderr=rec.stderr[-2000:])
    out = t.path("c.pb.gz")
    p = t.run([a.leakguard, "report", "--format", "pprof", "-o", out, rec.db])
    t.check(p.returncode == 0 and p.stdout == "" and p.stderr == "", "report --format pprof -o FILE: exit 0, quiet",
            exit=p.returncode, stderr=p.stderr)
    stype, samples = decode(out)
    names = [n for n, u in stype]
    t.check(names == TYPES, "the six sample types, in order: the growth first, then the peak", got=stype)
    # issue #35: the default was inuse_space, empty for a program that frees at exit
    t.check(default_type(out) == "growth_space_per_second", "a leaking program's default sample type is the growth",
            got=default_type(out))
    G, P, U, O = (TYPES.index(n) for n in ("growth_space_per_second", "peak_inuse_space", "inuse_space",
                                           "inuse_objects"))
    con = sqlite3.connect(rec.db)
    live = con.execute("SELECT sum(s.live_bytes), sum(s.live_blocks) FROM samples s JOIN (SELECT proc, stack,"
                       " max(seq) m FROM samples GROUP BY proc, stack) l ON s.proc = l.proc AND"
                       " s.stack = l.stack AND s.seq = l.m").fetchone()
    con.close()
    t.check(sum(v[U] for _, v in samples) == live[0] and sum(v[O] for _, v in samples) == live[1],
            "inuse_space and inuse_objects sum to the database's live bytes and blocks at the end",
            profile=(sum(v[U] for _, v in samples), sum(v[O] for _, v in samples)), database=live)
    rep = t.report_json(rec.db)
    want = sum(s["growth_bytes_per_s"] for s in rep["suspects"])
    got = sum(v[G] for _, v in samples)
    t.check(abs(got - want) <= len(samples) + 1, "growth samples sum to the suspects' growth per second",
            profile=got, report=want)
    top = max(samples, key=lambda s: s[1][G])
    leaf = top[0][0] if top[0] else ("?", "", 0)
    t.check(site.func_matches(leaf[0]) and site.file_matches(leaf[1]) and leaf[2] == site.line,
            "the fastest grower's leaf is the LEAK-SITE line %s:%d" % (site.function, site.line), leaf=leaf)
    check_mappings(t, out, rec.db, "C", False)
    t.check(all(v[P] >= 0 for _, v in samples) and sum(v[P] for _, v in samples) >= sum(v[U] for _, v in samples),
            "peak_inuse_space: the process's peak holds at least what the end holds here (a leak)")
    if go:
        env = dict(os.environ, HOME=t.tmp, PPROF_TMPDIR=t.tmp)
        g = t.run([go, "tool", "pprof", "-top", "-lines", "-sample_index=growth_space_per_second", out], env=env)
        rows = [ln for ln in g.stdout.splitlines() if "%" in ln and ":" in ln]
        t.check(g.returncode == 0 and rows and site.function in rows[0] and
                ("late_leak.c:%d" % site.line) in rows[0],
                "go tool pprof -top: the first row is the LEAK-SITE line", stdout=g.stdout[-3000:],
                stderr=g.stderr[-2000:])
        # without -sample_index: the default type, the growth ("Total samples = 0" before)
        g = t.run([go, "tool", "pprof", "-top", "-lines", out], env=env)
        rows = [ln for ln in g.stdout.splitlines() if "%" in ln and ":" in ln]
        t.check(g.returncode == 0 and "Type: growth_space_per_second" in g.stdout and rows and
                ("late_leak.c:%d" % site.line) in rows[0],
                "go tool pprof -top (no -sample_index): growth, the LEAK-SITE line first", stdout=g.stdout[-3000:],
                stderr=g.stderr[-2000:])

    # Python: Python frames are functions with their file and line; leaf first
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(a.leakguard), "..", "python"), LG_PY_SECONDS="3")
    script = t.fx.source(os.path.join(PY_DIR, "pure_sessions.py"))
    py = t.fx.run("py", lambda: t.lg_run(["/usr/bin/python3", script], db=t.path("py.db"), env=env))
    t.check(py.returncode == 0, "recorded pure_sessions.py", stderr=py.stderr[-2000:])
    pout = t.path("py.pb.gz")
    p = t.run([a.leakguard, "report", "-f", "pprof", "-o", pout, py.db])
    t.check(p.returncode == 0, "report --format pprof of a Python run", stderr=p.stderr)
    stype, samples = decode(pout)
    check_mappings(t, pout, py.db, "Python", True)
    top = max(samples, key=lambda s: s[1][TYPES.index("growth_space_per_second")])
    frames = top[0]
    pyi = [i for i, fr in enumerate(frames) if fr[1].endswith("pure_sessions.py")]
    t.check(bool(pyi) and frames[pyi[0]][0] == "Session.__init__" and frames[pyi[0]][2] == 12,
            "the fastest grower's innermost Python frame is Session.__init__ at pure_sessions.py:12",
            frames=frames[:12])
    t.check(bool(pyi) and all(not fr[1].endswith(".py") for fr in frames[:pyi[0]]) and
            all(fr[1].endswith(".py") or fr[1].startswith("<") for fr in frames[pyi[0]:]),
            "leaf first: native frames under the Python line, then the Python frames outward", frames=frames[:12])
    if go:
        g = t.run([go, "tool", "pprof", "-top", "-lines", "-sample_index=growth_space_per_second", pout],
                  env=dict(os.environ, HOME=t.tmp, PPROF_TMPDIR=t.tmp))
        rows = [ln for ln in g.stdout.splitlines() if "%" in ln and ":" in ln]
        t.check(g.returncode == 0 and rows and "Session.__init__" in rows[0] and "pure_sessions.py:12" in rows[0],
                "go tool pprof -top: the first row is Session.__init__ pure_sessions.py:12", stdout=g.stdout[-3000:])

    # errors: binary output to a terminal; an output file that cannot be written
    master, slave = pty.openpty()
    try:
        p = subprocess.run([a.leakguard, "report", "--format", "pprof", rec.db], stdout=slave,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(slave)
        os.close(master)
    p.stdout = ""
    lgtest.one_line_error(t, p, "pprof to a terminal", expect_rc=2, mention=["binary", "-o"])
    p = t.run([a.leakguard, "report", "--format", "pprof", "-o", "/nonexistent/dir/x.pb.gz", rec.db])
    lgtest.one_line_error(t, p, "an output file that cannot be written", expect_rc=2, mention=["/nonexistent/dir"])
    # databases that are not (or no longer) leakguard's: one line, status 2, no profile
    bad = lgtest.bad_databases(t, rec.db)
    for what, db, mention in (("a missing database", bad["missing"], None),
                              ("a truncated database", bad["truncated"], "damaged"),
                              ("an SQLite database that is not leakguard's", bad["foreign"], "not a leakguard"),
                              ("a schema from the future", bad["future"], "schema")):
        p = t.run([a.leakguard, "report", "--format", "pprof", "-o", t.path("bad.pb.gz"), db])
        lgtest.one_line_error(t, p, what, expect_rc=2, mention=[mention] if mention else None)
        t.check(not os.path.exists(t.path("bad.pb.gz")), "%s: no profile is left behind" % what)
    t.finish()


if __name__ == "__main__":
    main()
