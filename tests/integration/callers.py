#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""callers: 48 call chains reach malloc through the same helpers at the same depth (as
C++ code reaches it through operator new), interleaved round after round. The recorder
caches stacks by where malloc returns to and the stack pointer there; the chains differ
only further up. Every caller's live bytes and blocks at the end must be exactly what
the program says it keeps (tests/scenarios/callers.c): a cache that handed one chain's
stack to another would move bytes between callers.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402


def main():
    args = lgtest.parse_args()
    t = lgtest.Test("callers", args)
    p = t.lg_run([t.bin("callers"), "--rounds", "200"])
    t.check(p.returncode == 0, "the run exits 0", exit=p.returncode, stderr=p.stderr[-2000:])
    want = {}
    for line in p.stdout.splitlines():
        m = re.fullmatch(r"(caller_\d+) (\d+) (\d+)", line)
        if m:
            want[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    t.check(len(want) == 48, "the program names its 48 callers", stdout=p.stdout[-2000:])
    rows = lgtest.db_query(
        p.db, "SELECT s.stack, s.live_bytes, s.live_blocks, s.alloc_blocks FROM samples s "
        "WHERE s.seq = (SELECT MAX(seq) FROM samples x WHERE x.proc = s.proc AND x.stack = s.stack)")
    frames = {}
    for stack, idx, fn in lgtest.db_query(p.db, "SELECT stack, idx, function FROM frames ORDER BY stack, idx"):
        frames.setdefault(stack, []).append(fn or "")
    got, allocs = {}, {}
    for stack, live, blocks, alloc_blocks in rows:
        caller = next((f for f in frames.get(stack, []) if re.fullmatch(r"caller_\d+", f)), None)
        if caller is None:
            continue
        b, n = got.get(caller, (0, 0))
        got[caller] = (b + live, n + blocks)
        allocs[caller] = allocs.get(caller, 0) + alloc_blocks
    wrong = {c: {"want": want[c], "got": got.get(c)} for c in want if got.get(c) != want[c]}
    t.check(not wrong, "every caller's live bytes and blocks are exactly its own", wrong=wrong)
    # the stacks that still hold blocks are stored: each caller's kept one allocated a
    # block a round, no more (its freed one's, a line further, would add to it if taken
    # for it), no fewer
    off = {c: allocs.get(c) for c in want if allocs.get(c) != want[c][1]}
    t.check(not off, "every caller's kept stack counted its own allocations alone", off=off)
    t.finish()


if __name__ == "__main__":
    main()
