# SPDX-License-Identifier: MIT
# Control (pure Python): a bounded deque keeps the last 64 buffers; memory plateaus.
import collections

from _common import steps

recent = collections.deque(maxlen=64)

for i in steps():
    recent.append(bytearray(8192))
