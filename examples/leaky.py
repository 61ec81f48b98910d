# SPDX-License-Identifier: MIT
"""leaky.py - the bundled example in Python, leaky.c's toy request handler: a response
cache whose key never matches (it includes the request counter), so the cache grows
forever, next to a per-request buffer that is dropped and a startup table that lives for
the whole run. `leakguard run -- python3 examples/leaky.py` should name cache_put()'s
line as the first leak (and the key's line, whose strings the cache keeps too).

Usage: python3 leaky.py [SECONDS]   (default 6)
"""
import sys
import time

try:
    import leakguard  # a step per request; present under `leakguard run`
except ImportError:
    leakguard = None

cache = {}


def cache_put(key, size):
    cache[key] = bytearray(size)  # kept forever: the key never matches again


def handle_request(n):
    key = "user-7:%d" % n  # the bug: the counter is in the key
    if key in cache:
        return True
    work = bytearray(64 * 1024)  # per-request buffer, dropped
    cache_put(key, 2048)
    del work
    return False


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
    table = bytearray(4 << 20)  # startup table, lives for the whole run
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < seconds:
        handle_request(n)
        n += 1
        if leakguard is not None:
            leakguard.step()
        time.sleep(0.002)
    print("served %d requests (table of %d bytes)" % (n, len(table)))


if __name__ == "__main__":
    main()
