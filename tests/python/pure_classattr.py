# SPDX-License-Identifier: MIT
# Leak (pure Python): a cache kept in a class attribute, keyed by a value that never
# repeats.
from _common import steps


class Registry:
    cache = {}

    @classmethod
    def lookup(cls, key):
        if key not in cls.cache:
            cls.cache[key] = bytearray(8192)  # LEAK-SITE
        return cls.cache[key]


for i in steps():
    Registry.lookup(("request", i))
