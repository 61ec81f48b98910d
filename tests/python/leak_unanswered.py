# SPDX-License-Identifier: MIT
# Leak (pure Python), with the main thread never running Python code: it waits in
# join() (a lock, in C) while a worker thread leaks, and the worker ends the process
# with os._exit. The collector's explain requests are served by the main thread only
# (between two of its bytecodes), so none is answered and no exit hook runs: the report
# must say why the leak has no holder, not leave it blank.
import os
import sys
import threading

from _common import steps

kept = []


def work():
    for i in steps():
        kept.append(bytearray(16384))  # LEAK-SITE
    sys.stdout.flush()
    os._exit(0)


t = threading.Thread(target=work)
t.start()
t.join()  # never returns: the worker exits the process
