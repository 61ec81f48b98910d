# SPDX-License-Identifier: MIT
"""A stdlib-only Python web app for the recorder's cost on a real kind of program
(issue #32). Not a test: bench/server_bench.py drives it with wrk.

  python3 bench/py_webapp.py [PORT]        (loopback only; default 8090)

http.server's ThreadingHTTPServer, HTTP/1.1 keep-alive. GET /items?n=K&q=WORD parses
the query, builds K records (dicts, lists, strings, a small class), filters and sorts
them, and answers them as JSON: a typical request's few thousand small objects.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class Item:
    __slots__ = ("id", "name", "tags", "score")

    def __init__(self, i, q):
        self.id = i
        self.name = f"{q}-{i * 7919 % 1000}"
        self.tags = ["alpha", f"beta-{i % 5}", q]
        self.score = (i * 31 % 97) / 9.7

    def as_dict(self):
        return {"id": self.id, "name": self.name, "tags": list(self.tags), "score": round(self.score, 3)}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # one write per answer (headers and body), no Nagle: else keep-alive answers wait
    # for the client's delayed ACK (40 ms each)
    wbufsize = -1
    disable_nagle_algorithm = True

    def do_GET(self):
        url = urlsplit(self.path)
        if url.path != "/items":
            body = b'{"error": "not found"}'
            self.send_response(404)
        else:
            qs = parse_qs(url.query)
            n = max(0, min(int(qs.get("n", ["16"])[0]), 1000))
            q = qs.get("q", ["item"])[0]
            items = [Item(i, q) for i in range(n)]
            items = sorted((x for x in items if x.score >= 0), key=lambda x: (-x.score, x.name))
            body = json.dumps({"items": [x.as_dict() for x in items], "agent": self.headers.get("User-Agent", "")})
            body = body.encode()
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8090
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
