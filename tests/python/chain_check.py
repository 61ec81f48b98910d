#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The Python chain cache (src/capture/unwind.c, lgi_python_chain_key; issue #32) in one
CPython (--python 3.X, found at run time; absent: exit 77, saying which), end to end in
a full recording.

A recorded allocation made by the interpreter takes its stack id from a per-thread
cache keyed by its Python chain read as pointers. The program makes two cases where a
wrong key would give objects another chain's stack:
  reuse   a function compiled from the same source 400 times or more, under two file
          names in turn (gen0.py, gen1.py), each copy freed before the next: code
          objects take the addresses of dead ones compiled under the other name. Each
          file must hold its own rounds/2 x 50 bytearrays. The program says how often
          that happened (the case was there). --allocator malloc (PYTHONMALLOC=malloc,
          where reuse is in every round) tests the key's code fingerprints, pymalloc
          (kept and wrapped) its count of code deaths. A new file name string at a dead
          one's address too, with other text, is what the fingerprint is for; this
          program cannot make the allocator do that reliably, so it is not asserted;
  callers one line (LEAF-LINE) reached from two callers, 3 000 times from caller_a,
          then 1 000 from caller_b: its site must have two stacks of 3:1 bytes, the
          larger one through caller_a.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77

MAIN = """\
import json, os
KEEP = []
SRC = "def make(n):\\n    return [bytearray(64) for _ in range(n)]\\n"
seen, reused = {}, 0
i = 0
while i < 400 or (reused < 20 and i < 4000) or i % 2:
    ns = {}
    code = compile(SRC, "gen%d.py" % (i % 2), "exec")
    exec(code, ns)
    fn = ns["make"]
    a = id(fn.__code__)
    reused += seen.get(a, i % 2) != i % 2
    seen[a] = i % 2
    KEEP.append(fn(50))
    del ns, fn, code
    i += 1
def leaf():
    return bytearray(100)  # LEAF-LINE
def caller_a():
    return [leaf() for _ in range(3000)]
def caller_b():
    return [leaf() for _ in range(1000)]
KEEP.append(caller_a())
KEEP.append(caller_b())
print(json.dumps({"reused": reused, "rounds": i}), flush=True)
os._exit(0)  # nothing freed at exit: the report's live bytes are the program's
"""
LEAF_LINE = MAIN.splitlines().index("    return bytearray(100)  # LEAF-LINE") + 1
CALLER_A_LINE = LEAF_LINE + 2


def main():
    sys.path.insert(0, HERE)
    import pyinterp
    a, python = pyinterp.check_script_args(
        __doc__, lambda ap: ap.add_argument("--allocator", choices=("malloc", "pymalloc"), default="malloc"))
    if not python:
        return SKIP
    tmp, script, env = pyinterp.script_case("lgpy-chain-", a.pydir, MAIN)
    if a.allocator == "malloc":
        # Every object a malloc block: glibc hands a freed code object's block back to
        # the next request of its size (reuse happened in every run). The chain key
        # then fingerprints each link's code object (python.c, code_fp).
        env = dict(env, PYTHONMALLOC="malloc")
    # pymalloc (wrapped, full mode): the key mixes in the count of code objects' deaths
    # instead of the fingerprints; its pools hand a dead code object's address back in
    # only some rounds (other requests of its size class come between), so the program
    # goes on (ROUNDS) until it saw enough of them.
    checks = pyinterp.Checks()
    check = checks.check
    db = os.path.join(tmp, "run.db")
    cmd = [a.leakguard, "run", "-q", "-o", db, "--", python, script]
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       timeout=240)
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and r.stdout.strip() else {}
    check("reused" in out, "the program ran recorded", rc=r.returncode, stderr=r.stderr[-2000:])
    check(out.get("reused", 0) > 0, "reuse: a code object took a dead one's address under the other file name",
          out=out)
    rep = subprocess.run([a.leakguard, "report", "-f", "json", db], stdout=subprocess.PIPE,
                         universal_newlines=True, timeout=120)
    d = json.loads(rep.stdout) if rep.returncode == 0 else {}
    # every site once: the suspects (which the leaks group), the rest (the program's lists
    # grow while it runs: on a busy machine their sites may be judged leaks)
    sites = [s for k in ("suspects", "minor_growth", "largest_non_leaking") for s in d.get(k) or []]
    blocks = {}
    for s in sites:
        f = s["site"].get("file")
        if f in ("gen0.py", "gen1.py") and s["site"].get("line") == 2:
            blocks[f] = blocks.get(f, 0) + s["live_blocks"]
    # rounds/2 calls x 50 bytearrays per file; each bytearray is one object and one
    # buffer (CPython's free lists hand back a few older objects: within 2 %)
    want = out.get("rounds", 400) // 2 * 50 * 2
    check(all(abs(blocks.get(f, 0) - want) <= want // 50 for f in ("gen0.py", "gen1.py")),
          "reuse: gen0.py:2 and gen1.py:2 hold about %d blocks each" % want, blocks=blocks)
    leaf = [s for s in sites if s["site"].get("file") == script and s["site"].get("line") == LEAF_LINE]
    check(len(leaf) == 1, "callers: one site at main.py:%d" % LEAF_LINE,
          sites=[(s["site"].get("file"), s["site"].get("line")) for s in sites[:10]])
    if leaf:
        st = sorted((x["live_bytes"] for x in leaf[0]["stacks"]), reverse=True)
        # pymalloc's table of arenas (48 bytes an arena, PyMem_RawRealloc'd as it doubles:
        # 3 072 bytes at 64 arenas on 3.9) grows at whatever line needed a new arena:
        # one block of up to 16 KiB on either stack
        slack = st[1] // 20 + (16384 if a.allocator == "pymalloc" else 0) if st else 0
        check(len(st) == 2 and abs(st[0] - 3 * st[1]) <= slack,
              "callers: two stacks, 3:1 bytes (caller_a, caller_b)", stacks=leaf[0]["stacks"])
        fr = [(f.get("function"), f.get("line")) for f in leaf[0]["frames"]]
        check(any(ln == CALLER_A_LINE and fn.startswith("caller_a") for fn, ln in fr),
              "callers: the site's main stack runs through caller_a (main.py:%d)" % CALLER_A_LINE, frames=fr)
    return checks.finish(tmp)


if __name__ == "__main__":
    sys.exit(main())
