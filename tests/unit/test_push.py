"""GatewayClient.push_snapshot(): one POST to a gateway's internal listener; clear
errors when it fails."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from control_plane.runtime.procs import free_port
from control_plane.clients.gateway import GatewayClient, GatewayError
from control_plane.services.snapshot import ResolveError, resolve_ipv4


@pytest.fixture
def listener():
    """A server that answers each POST with the next (status, body) in `answers`."""
    answers: list[tuple[int, bytes]] = []
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                         "body": json.loads(body)})
            status, payload = answers.pop(0)
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", answers, seen
    server.shutdown()
    server.server_close()


def test_returns_acked_version(listener):
    url, answers, seen = listener
    answers.append((200, b'{"version": 7}'))
    assert GatewayClient("tok", timeout=2).push_snapshot(url + "/", {"version": 7}) == 7
    assert seen == [{"path": "/internal/snapshot", "auth": "Bearer tok",
                     "body": {"version": 7}}]


@pytest.mark.parametrize("status,body,message", [
    (409, b'{"error": {"code": 409, "message": "older than served"}}',
     "HTTP 409: older than served"),
    (400, b"not json", "HTTP 400: not json"),
    (200, b'{"v": 1}', "answer has no version"),
    (200, b'{"version": "7"}', "is not an integer"),
])
def test_failures(listener, status, body, message):
    url, answers, _ = listener
    answers.append((status, body))
    with pytest.raises(GatewayError, match=message):
        GatewayClient("tok", timeout=2).push_snapshot(url, {"version": 7})


def test_unreachable():
    with pytest.raises(GatewayError, match="ConnectionError"):
        GatewayClient(None, timeout=2).push_snapshot(f"http://127.0.0.1:{free_port()}",
                                                     {"version": 1})


def test_an_answer_is_not_retried_but_a_refused_connection_is(listener):
    url, answers, seen = listener
    answers.append((503, b'{"error": {"code": 503, "message": "busy"}}'))
    with pytest.raises(GatewayError, match="HTTP 503: busy") as err:
        GatewayClient("tok", timeout=2, retries=3).push_snapshot(url, {"version": 1})
    assert err.value.status == 503 and len(seen) == 1


def test_resolve():
    assert resolve_ipv4("localhost") == "127.0.0.1"
    assert resolve_ipv4("10.1.2.3") == "10.1.2.3"
    with pytest.raises(ResolveError):
        resolve_ipv4("no-such-host.invalid")


def test_a_refused_connection_is_retried_until_the_listener_is_there():
    """The connection retry: a gateway that starts listening between two attempts."""
    import socket
    import threading as th

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()                         # nothing listens: refused
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "14")
            self.end_headers()
            self.wfile.write(b'{"version": 3}')

        def log_message(self, *args):
            pass

    def listen_soon():
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        th.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
    started: list = []
    timer = th.Timer(0.15, listen_soon)
    timer.start()
    client = GatewayClient("tok", timeout=2, retries=20)
    try:
        assert client.push_snapshot(f"http://127.0.0.1:{port}", {"version": 3}) == 3
    finally:
        timer.join()
        for server in started:
            server.shutdown()
            server.server_close()
    assert seen == ["/internal/snapshot"]
