# SPDX-License-Identifier: MIT
# Leak (pure Python) in a forked worker: the child keeps every buffer it makes and
# exits through sys.exit (so its exit-time explain runs); the parent waits.
import os
import sys

from _common import steps

seen = []

pid = os.fork()
if pid == 0:
    for i in steps():
        seen.append(bytearray(8192))  # LEAK-SITE
    sys.exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
