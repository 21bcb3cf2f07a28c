"""Demo model backends: small real HTTP servers for `make run`, tests and benchmarks.

Protocols, all plain HTTP/1.1 with keep-alive (the others — ``kserve_v2``,
``tfserving``, ``vendor-a``, ``vendor-b`` — and OpenAI's completions and embeddings
are described in ``control_plane/demo/protocols.py``; audio, images and the ASR
vendors ``asr-json``, ``asr-raw`` in ``control_plane/demo/media.py``):

- ``openai``: ``POST /v1/chat/completions`` (plain and SSE streaming,
  ``control_plane/demo/openai_chat.py``) and ``GET /v1/models``. The answer echoes the
  last user message as ``"echo: <text>"``.
- ``anthropic``: Anthropic's ``POST /v1/messages`` (plain and SSE streaming, tool use;
  ``control_plane/demo/anthropic_messages.py``).
- ``openai_responses``: the OpenAI Responses API natively (``POST /v1/responses``,
  a kept response's ``/v1/responses/{id}`` paths: ``control_plane/demo/openai_responses.py``).
- ``predict``: ``POST /v1/models/{model}/predict`` (KServe-v1 style) and
  ``GET /v1/models/{model}``. Predictions are derived deterministically from
  ``instances`` (or ``input``).

Both answer ``GET /health``; with ``--metrics vllm|triton|dcgm`` also ``GET /metrics``
in that server's Prometheus shape (``control_plane/demo/metrics.py``). Every response
carries:

- ``X-Demo-Backend``: the backend's name;
- ``X-Demo-Saw-Authorization``: ``yes`` when the request carried ``Authorization`` or
  ``X-API-Key`` (gateway tests use it to prove the caller's key never got through);
- ``X-Demo-Authorization-Sha256``: sha256 hex of the ``Authorization`` it received, when
  there was one (shows which credential arrived without echoing a secret);
- ``X-Demo-Request-Id``: the ``X-Request-Id`` the request carried, when it carried one.

Fault injection, per request through request headers (they override the flags):

- ``X-Demo-Latency-Ms: N``: sleep N ms before answering;
- ``X-Demo-Status: S``: answer status S with an error body in the protocol's shape;
- ``X-Demo-Chunk-Delay-Ms: N``: sleep N ms between SSE chunks.
- ``X-Demo-Hold: T``: wait (at most HOLD_MAX_S) until ``POST /demo/release/T``;
  tests hold requests in flight for as long as they need, without guessing a delay.

``--loading-seconds N``: the model loads for N seconds (``readiness.py``).

``--failure-rate F`` makes a fraction F of inference requests answer 500 (``/health``
is exempt, so a flaky backend still looks alive to health checks).

Token counts in ``usage`` are whitespace-separated words (``openai_chat.py``).

Run: ``python -m control_plane.demo.backends --protocol openai --port 9101``.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from control_plane.demo import (anthropic_messages, media, metrics, openai_chat,
                                openai_responses, protocols, readiness)
from control_plane.demo.protocols import prediction  # noqa: F401 - part of this API

PROTOCOLS = (("openai", "predict", "openai_responses", "anthropic") + protocols.EXTRA_PROTOCOLS
             + media.PROTOCOLS)
MAX_BODY = 16 * 1024 * 1024
PREDICT_PATH = re.compile(r"^/v1/models/([^/]+)/predict$")
MODEL_PATH = re.compile(r"^/v1/models/([^/]+)$")
HOLD_MAX_S = 60.0

# OpenAI's error "type" for a status, so injected errors look like the real thing.
OPENAI_ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error",
    403: "permission_error", 404: "not_found_error", 429: "rate_limit_error",
}


BadRequest = protocols.BadRequest


class DemoServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its protocol, name and fault settings."""

    daemon_threads = True
    allow_reuse_address = True
    metrics: metrics.DemoMetrics | None = None    # GET /metrics when set (demo/metrics.py)

    def __init__(self, address, protocol: str, name: str, latency_ms: float = 0,
                 failure_rate: float = 0.0, chunk_delay_ms: float = 0,
                 seed: int | None = None, access_log: bool = False,
                 loading_s: float = 0.0):
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
        if not 0.0 <= failure_rate <= 1.0:
            raise ValueError("failure_rate must be within [0, 1]")
        self.protocol = protocol
        self.name = name
        self.latency_ms = latency_ms
        self.failure_rate = failure_rate
        self.chunk_delay_ms = chunk_delay_ms
        self.access_log = access_log
        self.readiness = readiness.Readiness(loading_s)
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        # Streams that ran to [DONE] and streams whose reader went away mid-way,
        # shown by /health so tests can see a gateway close the backend request.
        self.streams = {"completed": 0, "aborted": 0}
        self._thread: threading.Thread | None = None
        self._holds: dict[str, threading.Event] = {}
        self._holds_lock = threading.Lock()
        super().__init__(address, DemoHandler)

    def hold(self, token: str) -> threading.Event:
        """The event requests held with `X-Demo-Hold: token` wait for."""
        with self._holds_lock:
            return self._holds.setdefault(token, threading.Event())

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.port}"

    def should_fail(self) -> bool:
        if self.failure_rate <= 0:
            return False
        with self._rng_lock:
            return self._rng.random() < self.failure_rate

    def start(self) -> "DemoServer":
        """Serve on a daemon thread; returns self."""
        # A short poll interval keeps shutdown() quick (tests start many servers).
        self._thread = threading.Thread(target=self.serve_forever, args=(0.05,),
                                        daemon=True, name=f"demo-{self.name}")
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop serving and close the listening socket."""
        if self._thread is not None:
            super().shutdown()
            self._thread.join(5)
            self._thread = None
        self.server_close()


class DemoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Small writes (headers, then each SSE chunk) go out at once, as on real model
    # servers; with Nagle a peer's delayed ACK stalls them ~40 ms.
    disable_nagle_algorithm = True
    server: DemoServer
    server_version = "sluice-demo/1"

    # ---- plumbing -------------------------------------------------------------

    def log_message(self, fmt, *args):  # noqa: D102 - quiet unless asked
        if self.server.access_log:
            super().log_message(fmt, *args)

    def _read_body(self, limit: int = MAX_BODY) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > limit:
            raise BadRequest("body too large")
        return self.rfile.read(length) if length else b""

    def _json_body(self):
        raw = self._read_body()
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise BadRequest("body is not valid UTF-8") from None
        except ValueError as exc:
            raise BadRequest(f"body is not valid JSON: {exc}") from None

    def _demo_headers(self) -> None:
        self.send_header("X-Demo-Backend", self.server.name)
        saw = self.headers.get("Authorization") is not None or \
            self.headers.get("X-API-Key") is not None
        self.send_header("X-Demo-Saw-Authorization", "yes" if saw else "no")
        authorization = self.headers.get("Authorization")
        if authorization is not None:
            self.send_header("X-Demo-Authorization-Sha256",
                             hashlib.sha256(authorization.encode("latin-1")).hexdigest())
        request_id = self.headers.get("X-Request-Id")
        if request_id is not None:
            self.send_header("X-Demo-Request-Id", request_id)

    def _send_json(self, status: int, obj) -> None:
        body = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self._demo_headers()
        self.end_headers()
        self.wfile.write(body)

    def _send_error(self, status: int, message: str) -> None:
        """An error in this backend's own protocol shape."""
        body = protocols.error_body(self.server.protocol, status, message) \
            or media.error_body(self.server.protocol, status, message)
        if body is not None:
            self._send_json(status, body)
            return
        if self.server.protocol == "anthropic":
            body = anthropic_messages.error_body(status, message)
        elif self.server.protocol in ("openai", "openai_responses"):
            body = {"error": {"message": message,
                              "type": OPENAI_ERROR_TYPES.get(status, "server_error"),
                              "param": None, "code": status}}
        else:
            body = {"error": message, "code": status, "backend": self.server.name}
        self._send_json(status, body)

    def _header_number(self, name: str, default: float) -> float:
        value = self.headers.get(name)
        if value is None:
            return default
        try:
            return max(0.0, float(value))
        except ValueError:
            return default

    def _injected_fault(self, *, inference: bool) -> bool:
        """Apply latency and status overrides; True when an error was answered."""
        token = self.headers.get("X-Demo-Hold")
        if token and inference:
            self.server.hold(token).wait(HOLD_MAX_S)
        latency = self._header_number("X-Demo-Latency-Ms",
                                      self.server.latency_ms if inference else 0)
        if latency:
            time.sleep(latency / 1000.0)
        status = self.headers.get("X-Demo-Status")
        if status is not None:
            try:
                code = int(status)
            except ValueError:
                code = 0
            if 100 <= code <= 599 and code != 200:
                self._send_error(code, f"injected status {code}")
                return True
        if inference and self.server.should_fail():
            self._send_error(500, "injected failure")
            return True
        return False

    # ---- dispatch -------------------------------------------------------------

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if readiness.handle_get(self, path):
            return
        if path == "/health":
            if not self._injected_fault(inference=False):
                self._send_json(200, {"status": "ok", "name": self.server.name,
                                      "protocol": self.server.protocol,
                                      "streams": self.server.streams})
            return
        if metrics.handle(self, "GET", path):
            return
        if self.server.protocol == "openai" and path == "/v1/models":
            if not self._injected_fault(inference=False):
                self._send_json(200, {"object": "list", "data": [
                    {"id": self.server.name, "object": "model", "created": 0,
                     "owned_by": "sluice-demo"}]})
            return
        if self.server.protocol == "anthropic" and path == "/v1/models":
            if self.server.readiness.loading():   # the controller's probe: loading
                self._send_error(503, "model is loading")
            elif not self._injected_fault(inference=False):
                self._send_json(200, {"data": [
                    {"type": "model", "id": self.server.name, "display_name": self.server.name,
                     "created_at": "2026-01-01T00:00:00Z"}],
                    "has_more": False, "first_id": self.server.name,
                    "last_id": self.server.name})
            return
        if self._kept_response("GET", path):
            return
        match = MODEL_PATH.match(path)
        if self.server.protocol == "predict" and match:
            if not self._injected_fault(inference=False):
                self._send_json(200, {"name": match.group(1), "ready": True})
            return
        self._send_error(404, f"no route for GET {path}")

    def _kept_response(self, method: str, path: str) -> bool:
        """openai_responses: a kept response's paths (openai_responses.route)."""
        if self.server.protocol != "openai_responses" \
                or not openai_responses.KEPT_PATH.match(path):
            return False
        self._read_body()   # (a cancel's empty body) drained: the connection stays usable
        if not self._injected_fault(inference=False):
            openai_responses.route(self, method, path)
        return True

    def do_DELETE(self):
        if not self._kept_response("DELETE", self.path.split("?", 1)[0]):
            self._send_error(404, f"no route for DELETE {self.path}")

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        if readiness.handle_post(self, path):
            return
        if self._kept_response("POST", path):
            return
        if path.startswith("/demo/release/"):
            self._read_body()
            self.server.hold(path[len("/demo/release/"):]).set()
            self._send_json(200, {"released": path[len("/demo/release/"):]})
            return
        try:
            if metrics.handle(self, "POST", path):
                return
            handle = media.route(self.server.protocol, path)   # audio, images (media.py)
            if handle is not None:
                body = self._read_body(media.MAX_UPLOAD)
                if not self._injected_fault(inference=True):
                    handle(self, body, self.path.partition("?")[2])
                return
            extra = protocols.route(self.server.protocol, path)
            if extra is not None:
                handle, match = extra
                body = self._json_body()
                if not self._injected_fault(inference=True):
                    handle(self, match, body)
                return
            if self.server.protocol == "openai_responses" and path == openai_responses.PATH:
                body = self._json_body()
                if not self._injected_fault(inference=True):
                    openai_responses.create(self, None, body)
                return
            if self.server.protocol == "openai" and path == "/v1/chat/completions":
                body = self._json_body()
                if not self._injected_fault(inference=True):
                    openai_chat.chat_completions(self, body)
                return
            if self.server.protocol == "anthropic" and path == anthropic_messages.PATH:
                body = self._json_body()
                if not self._injected_fault(inference=True):
                    anthropic_messages.messages(self, body)
                return
            match = PREDICT_PATH.match(path)
            if self.server.protocol == "predict" and match:
                body = self._json_body()
                if not self._injected_fault(inference=True):
                    self._predict(match.group(1), body)
                return
            self._read_body()  # drain, so the connection stays usable
        except (BadRequest, media.BadRequest, ValueError) as exc:
            self._send_error(400, str(exc))
            return
        self._send_error(404, f"no route for POST {path}")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    # ---- predict ----------------------------------------------------------------

    def _predict(self, model: str, body) -> None:
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object")
        if "instances" in body:
            inputs = body["instances"]
        elif "input" in body:
            inputs = body["input"]
        else:
            raise BadRequest("body needs 'instances' (a list) or 'input'")
        if not isinstance(inputs, list):
            inputs = [inputs]
        self._send_json(200, {"model": model, "backend": self.server.name,
                              "predictions": [prediction(x) for x in inputs]})


def serve(protocol: str, host: str, port: int, name: str, latency_ms: float = 0,
          failure_rate: float = 0.0, *, chunk_delay_ms: float = 0,
          seed: int | None = None, access_log: bool = False,
          loading_s: float = 0.0) -> DemoServer:
    """Start a demo backend on a daemon thread and return it (call ``.shutdown()``).

    ``port`` 0 picks a free port; read it back from ``.port``.
    """
    server = DemoServer((host, port), protocol, name, latency_ms=latency_ms,
                        failure_rate=failure_rate, chunk_delay_ms=chunk_delay_ms,
                        seed=seed, access_log=access_log, loading_s=loading_s)
    return server.start()


if __name__ == "__main__":
    from control_plane.demo.cli import main
    main()
