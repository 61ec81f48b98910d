# SPDX-License-Identifier: MIT
"""Python daemon style (issue #17): os.closerange(3, 65536) closes the recorder's
descriptors, then the program leaks (TT-PY-LEAK) and forks a child that leaks too;
the child's exit status must reach the report (reaped here by os.waitpid)."""
import os
import sys
import time

kept = []


def leak(seconds, size):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        kept.append(bytearray(size))  # TT-PY-LEAK
        time.sleep(0.02)


sys.stdout.flush()
os.closerange(3, 65536)
print("closerange: closed")
sys.stdout.flush()
leak(1.0, 32768)
pid = os.fork()
if pid == 0:
    leak(2.0, 16384)
    os._exit(9)
leak(2.0, 32768)
_, st = os.waitpid(pid, 0)
print("closerange: child exited with", os.waitstatus_to_exitcode(st))
# Exit without the interpreter's teardown, which frees the kept list: the
# leak stays live in the last snapshot however slow the collector is.
sys.stdout.flush()
os._exit(0)
