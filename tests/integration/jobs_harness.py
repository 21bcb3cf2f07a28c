"""What the async-job tests share: a webhook receiver (a real HTTP server that checks
signatures as a user's would), and a stack with a broker and `sluice worker`s."""
from __future__ import annotations

import hashlib
import hmac
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests


class Receiver:
    """Records every POST: (path, headers, body). Answers `status` (default 200)."""

    def __init__(self):
        self.calls: list[tuple[str, dict, bytes]] = []
        self.status = 200
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.calls.append((self.path, dict(self.headers), body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def jobs(self) -> list[dict]:
        with self._lock:
            return [json.loads(body) for _, _, body in self.calls]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def verify(secret: str, header: str, body: bytes, tolerance: float = 300) -> bool:
    """The check a receiver does (independent of sluice_client, which has its own)."""
    parts = dict(p.split("=", 1) for p in header.split(","))
    t = int(parts["t"])
    want = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return abs(time.time() - t) <= tolerance and hmac.compare_digest(want, parts["v1"])


def start_worker(stack, name: str = "worker"):
    return stack.spawn(name, [sys.executable, "-m", "control_plane.cli", "worker"])


def job_env(amqp_url: str, gateway_url: str) -> dict:
    return {"SLUICE_AMQP_URL": amqp_url, "SLUICE_WORKER_GATEWAY_URL": gateway_url,
            "SLUICE_WEBHOOK_ALLOW_PRIVATE": "1", "SLUICE_JOB_LEASE_S": "8",
            "SLUICE_JOB_SWEEP_INTERVAL": "0.5", "SLUICE_LOG_LEVEL": "INFO"}


def submit(gateway_url: str, key: str, text: str = "hello", model: str = "chat-demo",
           headers: dict | None = None, **kw) -> requests.Response:
    return requests.post(gateway_url + "/v1/chat/completions",
                         json={"model": model, "messages": [{"role": "user", "content": text}]},
                         headers={"Authorization": f"Bearer {key}", "Prefer": "respond-async",
                                  **(headers or {})}, timeout=10, **kw)


def job(gateway_url: str, key: str, job_id: str) -> requests.Response:
    return requests.get(f"{gateway_url}/v1/jobs/{job_id}",
                        headers={"Authorization": f"Bearer {key}"}, timeout=10)
