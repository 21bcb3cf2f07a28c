"""Throwaway HTTP backends for gateway tests: a handler base that answers in one
call, a server on a free port served from a thread, and a backend's snapshot entry."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Backend(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive, as the gateway's upstreams speak), quiet."""

    protocol_version = "HTTP/1.1"

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def answer(self, status: int, out: bytes, ctype: str = "application/json",
               headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(out)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@contextmanager
def served(handler):
    """`handler` served on a free loopback port from a thread while the block runs;
    yields the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def entry(bid: int, name: str, protocol: str, port: int, **over) -> dict:
    """The snapshot entry of a plain-HTTP backend on 127.0.0.1:`port`."""
    b = {"id": bid, "name": name, "protocol": protocol, "scheme": "http",
         "host": "127.0.0.1", "port": port, "host_header": f"127.0.0.1:{port}",
         "base_path": "", "weight": 1}
    b.update(over)
    return b
