# SPDX-License-Identifier: MIT
# Leak (pure Python) from worker threads: two threads append buffers to one global
# list; the main thread does healthy work.
import threading

from _common import steps

results = []
lock = threading.Lock()
stop = threading.Event()


def worker():
    while not stop.is_set():
        out = bytearray(4096)  # LEAK-SITE
        with lock:
            results.append(out)
        stop.wait(0.01)


threads = [threading.Thread(target=worker) for _ in range(2)]
for t in threads:
    t.start()
for _ in steps():
    len(bytearray(8192))
stop.set()
for t in threads:
    t.join()
