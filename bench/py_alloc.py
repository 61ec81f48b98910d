# SPDX-License-Identifier: MIT
"""Benchmark workload: a pure-Python allocation-heavy loop (dicts, lists, strings,
tuples, small objects; a bounded working set), about 5 s bare.
  LG_ALLOC_ROUNDS   rounds (default 60)
"""
import json
import os
import time


class Rec:
    __slots__ = ("key", "vals", "meta")

    def __init__(self, key, vals, meta):
        self.key, self.vals, self.meta = key, vals, meta


def round_(r):
    live = {}
    for i in range(20000):
        k = "k%d-%d" % (r, i)
        rec = Rec(k, [i, i * 2, i * 3], {"i": i, "s": str(i) * 3, "t": (i, r)})
        live[k] = rec
        if i % 4 == 0:
            live.pop("k%d-%d" % (r, i // 2), None)
    return sum(len(v.meta["s"]) for v in live.values())


t0 = time.monotonic()
rounds = int(os.environ.get("LG_ALLOC_ROUNDS", "60"))
acc = 0
for r in range(rounds):
    acc += round_(r)
print(json.dumps({"loop_s": round(time.monotonic() - t0, 3), "rounds": rounds, "acc": acc}))
