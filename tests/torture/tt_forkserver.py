# SPDX-License-Identifier: MIT
"""multiprocessing with the forkserver start method (issue #17): the fork server is
a fresh Python (spawned with close_fds), the workers are forked from it and reaped by
it, not by this program nor by leakguard. Every worker's exit code must be in the
report; then the parent leaks (TT-PY-LEAK)."""
import multiprocessing as mp
import os
import sys
import time


def work(code):
    kept = [bytearray(4096) for _ in range(100)]
    time.sleep(0.3)
    raise SystemExit(code + len(kept) * 0)


if __name__ == "__main__":
    mp.set_start_method("forkserver")
    procs = [mp.Process(target=work, args=(10 + i,)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    # The leak after the workers, and longer than elsewhere: the collector spends a
    # while on each process that ends (symbols; seconds in the sanitizer build on a
    # busy machine), which thins out the snapshots of the leak meanwhile.
    kept = []
    end = time.monotonic() + 4.0
    while time.monotonic() < end:
        kept.append(bytearray(32768))  # TT-PY-LEAK
        time.sleep(0.02)
    print("forkserver: worker exit codes", [p.exitcode for p in procs])
    # Exit without the interpreter's teardown, which frees the kept list: the
    # leak stays live in the last snapshot however slow the collector is.
    sys.stdout.flush()
    os._exit(0)
