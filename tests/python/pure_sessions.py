# SPDX-License-Identifier: MIT
# Leak (pure Python, every CPython 3.9-3.13): a dict of sessions that never expires;
# every request opens a session with a buffer, and nothing ever closes one.
from _common import steps

sessions = {}


class Session:
    def __init__(self, sid):
        self.sid = sid
        self.buf = bytearray(8192)  # LEAK-SITE


def handle(i):
    s = Session("s%d" % i)
    sessions[s.sid] = s
    scratch = bytearray(8192)  # freed at return: healthy churn
    return len(scratch) + len(s.buf)


for i in steps():
    handle(i)
