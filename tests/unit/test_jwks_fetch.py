"""clients/jwks.py against a real local HTTP server: discovery, and what it refuses."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from control_plane.clients.jwks import MAX_BYTES, JwksError, fetch_jwks

JWKS = b'{"keys": [{"kty": "EC", "crv": "P-256", "x": "x", "y": "y"}]}'


@pytest.fixture(scope="module")
def idp():
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            status, body, extra = {
                "/ok/.well-known/openid-configuration":
                    (200, f'{{"jwks_uri": "{base}/jwks.json"}}'.encode(), {}),
                "/none/.well-known/openid-configuration": (200, b"{}", {}),
                "/jwks.json": (200, JWKS, {}),
                "/html": (200, b"<html>", {}),
                "/list": (200, b"[1, 2]", {}),
                "/big": (200, b" " * (MAX_BYTES + 10) + b"{}", {}),
                "/moved": (302, b"", {"Location": "/jwks.json"}),
            }.get(self.path, (404, b"", {}))
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_discovery_is_followed_and_a_jwks_read_directly(idp):
    with requests.Session() as http:
        assert fetch_jwks(http, idp + "/ok/.well-known/openid-configuration",
                          allow_http=True)["keys"][0]["kty"] == "EC"
        assert fetch_jwks(http, idp + "/jwks.json", allow_http=True)["keys"]


@pytest.mark.parametrize("path, allow_http, words", [
    ("/ok/.well-known/openid-configuration", False, "is not https://"),
    ("/none/.well-known/openid-configuration", True, "names no jwks_uri"),
    ("/html", True, "not JSON"),
    ("/list", True, "not a JWKS"),
    ("/big", True, "over"),
    ("/moved", True, "HTTP 302"),
    ("/missing", True, "HTTP 404"),
])
def test_refused(idp, path, allow_http, words):
    with requests.Session() as http, pytest.raises(JwksError, match=words):
        fetch_jwks(http, idp + path, allow_http=allow_http)


def test_unreachable():
    with requests.Session() as http, pytest.raises(JwksError, match="ConnectionError"):
        fetch_jwks(http, "http://127.0.0.1:9/jwks.json", allow_http=True)
