# SPDX-License-Identifier: MIT
# Leak: a dict of lists that only grows (each of 50 keys' list gets one more record every
# step), beside a temporary list made and dropped every step (issue #34 item 5: its
# line came out as growing sites of the leak). The temporary's objects are reused
# through CPython's free lists and pymalloc's pools: it must never be a growing site.
# Each record is 2 KB so that sampled mode (one sample per 64 KiB) sees ~50 of them in
# a 4 s run: at 200 bytes it saw ~6, and one run in five found no leak.
from _common import steps

store = {}

for i in steps(pace=0.002):
    scratch = [str(j) * 3 for j in range(2000)]  # TEMP
    store.setdefault(i % 50, []).append("x" * 2000 + str(i))  # LEAK-SITE
    del scratch
