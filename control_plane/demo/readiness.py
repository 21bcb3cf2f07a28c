"""Readiness of a demo backend: a model that is still loading, as real servers show it.

``--loading-seconds N`` (``DemoServer(loading_s=N)``) makes the backend report
loading for its first N seconds, and ``POST /demo/loading {"seconds": N}`` starts
(N > 0) or ends (N = 0) a loading period at any time. While loading:

- ``GET /health`` answers 503 (vLLM's behaviour), every protocol;
- KServe v1 ``GET /v1/models/{m}`` answers ``{"name": m, "ready": false}``;
- OIP v2 ``GET /v2/models/{m}/ready`` answers 503 (200 once ready);
- TF Serving ``GET /v1/models/{m}`` shows ``model_version_status[0].state`` ``LOADING``
  (``AVAILABLE`` once ready);
- Anthropic ``GET /v1/models`` answers 503 (``backends.py``);
- inference answers 503 ``model is loading`` in the protocol's error shape.
"""
from __future__ import annotations

import json
import re
import time

V2_READY = re.compile(r"^/v2/models/([^/]+)/ready$")
MODEL_PATH = re.compile(r"^/v1/models/([^/:]+)$")


class Readiness:
    """When the model is loaded (monotonic clock)."""

    def __init__(self, loading_s: float = 0.0):
        self.ready_at = time.monotonic() + max(0.0, loading_s)

    def loading(self) -> bool:
        return time.monotonic() < self.ready_at

    def start_loading(self, seconds: float) -> None:
        self.ready_at = time.monotonic() + max(0.0, seconds)


def handle_get(handler, path: str) -> bool:
    """Answer the readiness endpoints; False when `path` is not one of them."""
    server = handler.server
    loading = server.readiness.loading()
    if path == "/health" and loading:
        handler._send_json(503, {"status": "loading", "name": server.name})
        return True
    m = V2_READY.match(path)
    if m and server.protocol == "kserve_v2":
        handler._send_json(503 if loading else 200, {"name": m.group(1), "ready": not loading})
        return True
    m = MODEL_PATH.match(path)
    if m and server.protocol == "tfserving":
        state = "LOADING" if loading else "AVAILABLE"
        handler._send_json(200, {"model_version_status": [
            {"version": "1", "state": state, "status": {"error_code": "OK", "error_message": ""}}]})
        return True
    if m and server.protocol == "predict" and loading:
        handler._send_json(200, {"name": m.group(1), "ready": False})
        return True
    return False


def handle_post(handler, path: str) -> bool:
    """The control endpoint, and 503 for inference while loading; False otherwise."""
    server = handler.server
    if path == "/demo/loading":
        try:
            seconds = float(json.loads(handler._read_body() or b"{}").get("seconds", 0))
        except (ValueError, AttributeError, TypeError):
            handler._send_error(400, 'body must be {"seconds": N}')
            return True
        server.readiness.start_loading(seconds)
        handler._send_json(200, {"loading": server.readiness.loading()})
        return True
    if server.readiness.loading():
        handler._read_body()  # drain, so the connection stays usable
        handler._send_error(503, "model is loading")
        return True
    return False
