# SPDX-License-Identifier: MIT
# Leak (pure Python): a list held only in a running function's local variable. The
# function never returns (a server loop that ends with os._exit), so the holder is the
# frame, not a module global; run with --explain-at-step (nothing runs at os._exit).
import os

from _common import steps


def serve():
    history = []
    for i in steps(min_steps=250):
        history.append(bytearray(8192))  # LEAK-SITE
    os._exit(0)


serve()
