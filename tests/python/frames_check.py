#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# -*- coding: utf-8 -*-
"""The recorder's Python frame reader against the interpreter's own view (issue #12).

  frames_check.py --python 3.X --lib BUILD/lib/liblg_pyframes_probe.so

finds CPython 3.X at run time (tests/python/pyinterp.py; absent: exit 77, saying which)
and re-runs itself under it. There, src/capture/python.c (in the probe library, called
through ctypes with the GIL released, as inside malloc) reads the calling thread's
frames, and every (file, function, line) must equal what sys._getframe() shows at the
same point: nested calls, a method, a generator, a coroutine, a comprehension, a
thread, deep recursion, non-ASCII names, and functions created after many code objects
were freed (their addresses are reused). Function names are qualified from 3.11
(co_qualname), plain before (3.9/3.10 code objects have no qualified name).
"""
import os
import subprocess
import sys

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))


def driver():
    import argparse
    sys.path.insert(0, HERE)
    import pyinterp
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True, help="3.X")
    ap.add_argument("--lib", required=True)
    a = ap.parse_args()
    exe, how = pyinterp.find(a.python)
    if not exe:
        print("SKIP: " + how, flush=True)
        return SKIP
    print("CPython %s: %s" % (how, exe), flush=True)
    return subprocess.call([exe, os.path.abspath(__file__), "--child", os.path.abspath(a.lib)])


# ----------------------------------------------------------------- under the target
# Runs under CPython 3.9-3.13: keep this part to the oldest one's syntax.

class Probe:
    """The reader (through the probe library) and the interpreter's own view of the
    calling thread's frames; .fails names the checks that failed."""

    def __init__(self, lib):
        import ctypes
        self.lib = lib
        self.buf = ctypes.create_string_buffer(1 << 16)
        self.qual = sys.version_info >= (3, 11)
        self.fails = []

    def read(self):
        n = self.lib.lgt_frames(self.buf, len(self.buf))
        assert n >= 0, "buffer too small"
        out = []
        for ln in self.buf.value.decode("utf-8").splitlines():
            f, fn, line = ln.split("\t")
            out.append((f, fn, int(line)))
        return out

    def want(self, depth=1):
        out = []
        f = sys._getframe(depth + 1)
        while f is not None:
            co = f.f_code
            out.append((co.co_filename, co.co_qualname if self.qual else co.co_name, f.f_lineno))
            f = f.f_back
        return out

    def say(self, ok, text, fail):
        """Prints TEXT as ok or FAIL; a failure is recorded as FAIL."""
        print(("  ok   " if ok else "  FAIL ") + text, flush=True)
        if not ok:
            self.fails.append(fail)

    def check(self, what):
        # read() and this frame are the reader's first two; the 64 it returns at most
        # then leave 62 of the caller's chain
        got, exp = self.read()[2:], self.want()[:62]
        ok = got == exp
        self.say(ok, "%s (%d frames)" % (what, len(exp)), what)
        if not ok:
            for i in range(max(len(got), len(exp))):
                g = got[i] if i < len(got) else None
                e = exp[i] if i < len(exp) else None
                print("      %s %r\n         want %r" % ("  " if g == e else "!=", g, e))


def check_frame_kinds(p):
    """Nested calls, a method, a generator, a coroutine, a comprehension."""
    # nested calls
    def a():
        return b()

    def b():
        return c()

    def c():
        p.check("nested calls")

    a()

    class Cache:
        def get(self):
            p.check("method (qualified name from 3.11)")

    Cache().get()

    def gen():
        yield 1
        p.check("generator frame")
        yield 2

    for _ in gen():
        pass

    async def coro():
        p.check("coroutine frame")

    co = coro()
    try:
        co.send(None)
    except StopIteration:
        pass

    [p.check("comprehension") for _ in range(1)]


def check_depth_names_thread(p):
    """Deep recursion (the first 62 frames), non-ASCII names, another thread."""
    import threading

    def deep(n):
        if n == 0:
            p.check("recursion 80 deep (first 62)")
        else:
            deep(n - 1)

    deep(80)

    def größe():
        p.check("Latin-1 name")

    def 函数():
        p.check("non-Latin-1 name")

    größe()
    函数()

    th = threading.Thread(target=lambda: p.check("thread"))
    th.start()
    th.join()


def check_import_cut(p):
    """Under an import, the walk ends at importlib's _call_with_frames_removed (the frame
    that runs the module's body): the chain of importers above it is left out, as in
    CPython's tracebacks, and that frame stays the outermost one."""
    import builtins
    import importlib
    import tempfile

    def check_import():
        got, full = p.read()[2:], p.want()
        cut = [i for i, fr in enumerate(full) if fr[1] == "_call_with_frames_removed"]
        exp = full[:cut[0] + 1] if cut else None
        ok = (exp is not None and got == exp and len(full) > len(exp) and exp[-1][0] ==
              "<frozen importlib._bootstrap>" and exp[0][0].endswith("lg_imported_mod.py"))
        p.say(ok, "under an import: %d of %d frames, up to _call_with_frames_removed"
              % (len(got), len(full)), "import cut")
        if not ok:
            print("      got  %r\n      want %r\n      full %r" % (got, exp, full))

    tmp = tempfile.mkdtemp()
    with open(os.path.join(tmp, "lg_imported_mod.py"), "w") as f:
        f.write("import builtins\n\n\nbuiltins._lg_check_import()\n")
    builtins._lg_check_import = check_import
    sys.path.insert(0, tmp)

    def importer():
        importlib.import_module("lg_imported_mod")

    importer()
    sys.path.remove(tmp)


def check_reused_code(p):
    """Code objects read by the reader, then freed: their addresses come back for new
    ones, which must not be taken for the old (the cache keys on more than the address)."""
    bad = []
    for rnd in range(40):
        for i in range(20):
            ns = {}
            exec(compile("class K%d:\n    def m(self, rd):\n        return rd()\n" % i,
                         "<old%d>" % i, "exec"), ns)
            ns["K%d" % i]().m(p.read)
            del ns
        ns = {}
        exec(compile("def fresh(rd):\n    return rd()\n", "fresh%d.py" % rnd, "exec"), ns)
        got = ns["fresh"](p.read)[1]
        if got != ("fresh%d.py" % rnd, "fresh", 2):
            bad.append(got)
    ok = not bad
    p.say(ok, "40 functions made after 800 read and freed code objects%s"
          % ("" if ok else ": %d read as %r" % (len(bad), bad[:3])), "reused code addresses")


def check_hash_later(p):
    """The same frame read again after its file name's hash was computed (it is -1 until
    then) must give the same pyframe ids: a changing fingerprint would split one
    allocation site into two."""
    import ctypes
    ids = []
    fname = "hash_later_%d.py" % os.getpid()
    ns = {}
    exec(compile("def f(rd):\n    return rd()\n", fname, "exec"), ns)
    arr = (ctypes.c_uint64 * 64)()

    def rd_ids():
        return tuple(arr[:p.lib.lgt_frame_ids(arr, 64)])

    for k in range(2):
        ids.append(ns["f"](rd_ids))
        if k == 0:
            hash(ns["f"].__code__.co_filename)
    p.say(ids[0] == ids[1], "same ids after the file name's hash was computed", "ids changed")


def child(lib_path):
    import ctypes

    lib = ctypes.CDLL(lib_path)
    lib.lgt_frames.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    p = Probe(lib)
    if not lib.lgt_init():
        print("FAIL: the reader does not accept CPython %d.%d" % sys.version_info[:2])
        return 1
    check_frame_kinds(p)
    check_depth_names_thread(p)
    check_import_cut(p)
    check_reused_code(p)
    check_hash_later(p)
    if p.fails:
        print("FAILED: " + "; ".join(p.fails))
        return 1
    print("PASSED (CPython %s)" % sys.version.split()[0])
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2]))
    sys.exit(driver())
