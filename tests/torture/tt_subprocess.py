# SPDX-License-Identifier: MIT
"""Python subprocess with close_fds=True (the default; issue #17): the child, a new
Python started by vfork+exec, leaks and exits 3; this program reaps it (through
os.waitpid inside subprocess), so only the recorder's wait hook can tell leakguard
its status. The parent leaks meanwhile (TT-PY-LEAK)."""
import os
import subprocess
import sys
import time

CHILD = r"""
import time
kept = []
end = time.monotonic() + 1.0
while time.monotonic() < end:
    kept.append(bytearray(8192))
    time.sleep(0.02)
raise SystemExit(3)
"""

kept = []
p = subprocess.Popen([sys.executable, "-c", CHILD], close_fds=True)
end = time.monotonic() + 2.0
while time.monotonic() < end:
    kept.append(bytearray(32768))  # TT-PY-LEAK
    time.sleep(0.02)
print("subprocess: child exited with", p.wait())
# Exit without the interpreter's teardown, which frees the kept list: the
# leak stays live in the last snapshot however slow the collector is.
sys.stdout.flush()
os._exit(0)
