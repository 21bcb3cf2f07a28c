"""The one client for a gateway's internal listener (docs/contracts.md, "Gateway
internal listener"). The controller's loops, the admin dashboard's metrics fan-out
and the runtime's Gateway all talk to gateways through it, so the token, the
timeouts, the retries and TLS verification are decided in one place:

- every call carries `Authorization: Bearer <gateway token>`;
- a connection that cannot be made is retried (`retries` times, 0.1 s apart): no byte
  reached the gateway, so even a POST is safe to repeat; an answer, good or bad, is
  never retried here (the controller's backoff owns that);
- https:// listeners are verified against `ca` (SLUICE_INTERNAL_CA, a PEM file), or
  the system store when none is given.

The typed calls (push_snapshot, stats, ...) raise GatewayError with a message fit for
`gateways.last_error`; `get`/`post` hand back the raw response for callers (tests, the
runtime) that look at statuses themselves.
"""
from __future__ import annotations

import time
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import NewConnectionError

from control_plane.settings import Settings

DEFAULT_TIMEOUT = 5.0
POOL_SIZE = 32   # parallel calls per gateway host (the loops' fan-out is 16)
RETRY_DELAY = 0.1


class GatewayError(Exception):
    """A gateway call failed; the message says which call and why (never the token)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def _message(resp: requests.Response) -> str:
    """The gateway's own error message, from its error template when it used one."""
    try:
        return str(resp.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return resp.text[:200].strip() or resp.reason or ""


def _never_sent(exc: requests.RequestException) -> bool:
    """Whether the request failed before a connection existed (refused, unreachable,
    connect timeout), so repeating it cannot apply anything twice."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if not isinstance(exc, requests.ConnectionError) or not exc.args:
        return False
    return isinstance(getattr(exc.args[0], "reason", None), NewConnectionError)


def _version(url: str, resp: requests.Response) -> int:
    try:
        version = resp.json()["version"]
    except (ValueError, KeyError, TypeError):
        raise GatewayError(f"POST {url}: answer has no version: {resp.text[:200]!r}") from None
    if not isinstance(version, int) or isinstance(version, bool):
        raise GatewayError(f"POST {url}: version {version!r} is not an integer")
    return version


class GatewayClient:
    """Calls to any number of gateways; one pooled HTTP session, thread-safe for the
    loops' parallel fan-out."""

    def __init__(self, token: str | None, *, timeout: float = DEFAULT_TIMEOUT,
                 ca: str | None = None, retries: int = 1):
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.http = requests.Session()
        # per request, not on the session: requests lets REQUESTS_CA_BUNDLE override a
        # session's verify, and then our CA would be silently ignored
        self.verify: str | bool = ca if ca else True
        # retries are ours (_send): urllib3's would log a warning per attempt
        adapter = HTTPAdapter(max_retries=0, pool_connections=POOL_SIZE,
                              pool_maxsize=POOL_SIZE)
        self.http.mount("http://", adapter)
        self.http.mount("https://", adapter)

    @classmethod
    def from_settings(cls, settings: Settings) -> "GatewayClient":
        """The client every control-plane process builds from its Settings."""
        return cls(settings.gateway_token, timeout=settings.push_timeout,
                   ca=settings.internal_ca)

    def close(self) -> None:
        self.http.close()

    # raw calls: the response whatever its status; network failures raise

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _send(self, method: str, url: str, body: Any, timeout: float | None
              ) -> requests.Response:
        for attempt in range(self.retries + 1):
            try:
                return self.http.request(method, url, json=body, headers=self._headers(),
                                         timeout=timeout or self.timeout, verify=self.verify)
            except requests.RequestException as exc:
                if attempt == self.retries or not _never_sent(exc):
                    raise
            time.sleep(RETRY_DELAY)
        raise AssertionError("not reached")

    def get(self, base: str, path: str, timeout: float | None = None) -> requests.Response:
        return self._send("GET", base.rstrip("/") + path, None, timeout)

    def post(self, base: str, path: str, body: Any,
             timeout: float | None = None) -> requests.Response:
        return self._send("POST", base.rstrip("/") + path, body, timeout)

    # typed calls: GatewayError on anything but the expected answer

    def _call(self, method: str, base: str, path: str, body: Any = None) -> requests.Response:
        url = base.rstrip("/") + path
        try:
            if method == "POST":
                resp = self.post(base, path, body)
            else:
                resp = self.get(base, path)
        except requests.RequestException as exc:
            raise GatewayError(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise GatewayError(f"{method} {url}: HTTP {resp.status_code}: {_message(resp)}",
                               status=resp.status_code)
        return resp

    def _json(self, method: str, base: str, path: str, body: Any = None) -> dict[str, Any]:
        resp = self._call(method, base, path, body)
        try:
            doc = resp.json()
        except ValueError:
            raise GatewayError(f"{method} {base.rstrip('/')}{path}: answer is not JSON: "
                               f"{resp.text[:200]!r}") from None
        if not isinstance(doc, dict):
            raise GatewayError(f"{method} {base.rstrip('/')}{path}: answer is not an object")
        return doc

    def push_snapshot(self, base: str, snapshot: dict[str, Any]) -> int:
        """POST /internal/snapshot; the version the gateway now serves."""
        resp = self._call("POST", base, "/internal/snapshot", snapshot)
        return _version(base.rstrip("/") + "/internal/snapshot", resp)

    def snapshot_status(self, base: str) -> dict[str, Any]:
        """GET /internal/snapshot: {"version", "loaded_at", "source", ...}."""
        return self._json("GET", base, "/internal/snapshot")

    def push_weights(self, base: str, body: dict[str, Any]) -> int:
        resp = self._call("POST", base, "/internal/weights", body)
        return _version(base.rstrip("/") + "/internal/weights", resp)

    def weights_status(self, base: str) -> dict[str, Any]:
        return self._json("GET", base, "/internal/weights")

    def push_health(self, base: str, body: dict[str, Any]) -> int:
        resp = self._call("POST", base, "/internal/health", body)
        return _version(base.rstrip("/") + "/internal/health", resp)

    def health_status(self, base: str) -> dict[str, Any]:
        return self._json("GET", base, "/internal/health")

    def stats(self, base: str) -> dict[str, Any]:
        """GET /internal/stats: {"backends": {"<id>": {...}}, "weights_version": N}."""
        doc = self._json("GET", base, "/internal/stats")
        if not isinstance(doc.get("backends"), dict):
            raise GatewayError(f"GET {base.rstrip('/')}/internal/stats: "
                               "backends is not an object")
        return doc

    def usage(self, base: str) -> dict[str, Any]:
        """GET /internal/usage: {"boot", "started_at", "counters", "seed_version", ...}."""
        return self._json("GET", base, "/internal/usage")

    def push_usage(self, base: str, body: dict[str, Any]) -> int:
        resp = self._call("POST", base, "/internal/usage", body)
        return _version(base.rstrip("/") + "/internal/usage", resp)

    def metrics(self, base: str, timeout: float | None = None) -> str:
        """GET /metrics: Prometheus text."""
        try:
            resp = self.get(base, "/metrics", timeout=timeout)
        except requests.RequestException as exc:
            raise GatewayError("timed out" if isinstance(exc, requests.Timeout)
                               else "unreachable") from exc
        if resp.status_code != 200:
            raise GatewayError(f"HTTP {resp.status_code}", status=resp.status_code)
        return resp.text
