"""The controller's active health checks, once per SLUICE_HEALTH_INTERVAL (≈2 s):

    each backend of the snapshot -> its protocol's readiness probe -> ready | loading |
    unreachable -> POST /internal/health to every gateway; changes -> backend_health

Probes (GET, SLUICE_HEALTH_TIMEOUT each, the backend's Host and credentials):

    openai      {base}/health                200 ready, 503 loading (vLLM while loading)
    openai_responses  {base}/health          the same
    openai_realtime  {base}/health           likewise (the WebSocket server's plain HTTP)
    predict     {base}/v1/models/{m}         200 {"ready": true} ready, false or 503 loading
    kserve_v2   {base}/v2/models/{m}/ready   200 ready, 503 loading
    tfserving   {base}/v1/models/{m}         a model_version_status AVAILABLE ready,
                                             LOADING or START loading
    vendor      not probed (no standard readiness endpoint): never marked
    (and a backend made from a hosted vendor's preset, "probe": false in the snapshot:
    OpenAI, Azure, Gemini, ... have no model server's readiness endpoint)

Anything else (refused, timed out, another status) is `unreachable`: shown in the admin
API and /metrics, but routing around failures stays the circuit breaker's job, so
only `loading` keeps traffic away (lua/sluice/health.lua). The gateway lets the states
lapse after `ttl_s`, so a controller that stops probing never strands a backend.

The controller's tick calls `kick()`, which never waits on a backend: it pushes the
results of the round that finished since the last tick, and starts the next round on a
background thread when one is due and none is running. So a hung backend delays no
tick (nor the snapshot pushes): its round simply ends after SLUICE_HEALTH_TIMEOUT.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

import requests
from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.clients.backend_tls import BackendClients, BackendTLS
from control_plane.clients.gateway import GatewayClient, GatewayError
from control_plane.controller.fanout import Notes, parallel
from control_plane.settings import Settings
from control_plane.tables.config import Gateway
from control_plane.tables.records import BackendHealth

log = logging.getLogger("sluice.controller.health")

RETRY_AFTER = 5            # seconds a caller is told to wait for a loading model
LOADING_STATES = {"LOADING", "START"}


def probe_path(protocol: str, model: str) -> str | None:
    """Where a backend of `protocol` serving `model` tells its readiness."""
    m = quote(model, safe="")
    return {"openai": "/health", "openai_responses": "/health", "openai_realtime": "/health",
            "predict": f"/v1/models/{m}",
            "kserve_v2": f"/v2/models/{m}/ready", "tfserving": f"/v1/models/{m}",
            "anthropic": "/v1/models"}.get(protocol)


def classify(protocol: str, status: int, doc: Any) -> tuple[str, str]:
    """(state, detail) from a probe's answer."""
    if status == 503:
        return "loading", "503"
    if status != 200:
        return "unreachable", f"HTTP {status}"
    if protocol == "predict" and isinstance(doc, dict) and doc.get("ready") is False:
        return "loading", "ready: false"
    if protocol == "tfserving":
        states = [s.get("state") for s in (doc or {}).get("model_version_status") or ()
                  if isinstance(s, dict)] if isinstance(doc, dict) else []
        if "AVAILABLE" in states:
            return "ready", ""
        if LOADING_STATES & set(states):
            return "loading", "/".join(str(s) for s in states)
        return "unreachable", "no AVAILABLE version"
    return "ready", ""


class HealthLoop:
    """Probes backends through their own clients (each https backend with its TLS
    settings) and pushes to gateways through `client`."""

    def __init__(self, client: GatewayClient, clock: Callable[[], float] = time.monotonic):
        self.client = client
        # the probes' own clients: each https backend with its TLS settings
        self.backends = BackendClients()
        self.clock = clock
        self.next_at = 0.0
        self.last_version = 0
        self.states: dict[str, tuple[str, str]] = {}   # backend id -> (state, detail)
        self._note = Notes(log)
        self._pool: ThreadPoolExecutor | None = None   # the background round (kick)
        self._round: Future | None = None
        self._lock = threading.Lock()
        self._finished: dict[str, tuple[str, str]] | None = None   # not pushed yet

    def due(self) -> bool:
        return self.clock() >= self.next_at

    @property
    def probing(self) -> bool:
        """Whether a round started by kick() is still probing."""
        return self._round is not None and not self._round.done()

    def kick(self, settings: Settings, session_factory: Callable[[], Session],
             gateways: list[Gateway], snapshot: dict[str, Any]) -> bool:
        """Push the round that finished since the last call, and start the next one in
        the background when it is due and none is running; returns whether one started."""
        with self._lock:
            finished, self._finished = self._finished, None
        if finished is not None:
            self.publish(settings, session_factory, gateways, finished)
        if self.probing or not self.due():
            return False
        self.next_at = self.clock() + settings.health_interval
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sluice-health")
        self._round = self._pool.submit(self._background_round, settings, snapshot)
        return True

    def close(self) -> None:
        """Start no more rounds; one in flight ends within its probes' timeout."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self.backends.close()

    def run(self, settings: Settings, session_factory: Callable[[], Session],
            gateways: list[Gateway], snapshot: dict[str, Any]) -> dict[str, dict]:
        """One round of probes in the caller's thread; returns the backends table pushed."""
        self.next_at = self.clock() + settings.health_interval
        return self.publish(settings, session_factory, gateways,
                            self.probe(settings, snapshot))

    def probe(self, settings: Settings, snapshot: dict[str, Any]) -> dict[str, tuple[str, str]]:
        """(state, detail) per backend id, from probing every backend of `snapshot`."""
        targets = [(name, b) for name, m in snapshot["models"].items()
                   for b in m["backends"]
                   if probe_path(b["protocol"], name) and b.get("probe", True)]
        results = parallel(targets, lambda t: self._probe(t[0], t[1], settings))
        return {str(b["id"]): result for (_, b), result in zip(targets, results)}

    def publish(self, settings: Settings, session_factory: Callable[[], Session],
                gateways: list[Gateway], states: dict[str, tuple[str, str]]) -> dict[str, dict]:
        """POST a round's states to every gateway and store the changes; returns the
        backends table pushed."""
        table: dict[str, dict] = {}
        for bid, (state, _) in states.items():
            table[bid] = {"state": state}
            if state == "loading":
                table[bid]["retry_after"] = RETRY_AFTER
        version = max(int(time.time() * 1000), self.last_version + 1)
        body = {"version": version, "backends": table,
                "ttl_s": max(10.0, 5 * settings.health_interval)}
        parallel([g.internal_url for g in gateways], lambda u: self._push(u, body))
        self.last_version = version
        changed = {bid: s for bid, s in states.items() if self.states.get(bid) != s}
        if changed:
            self._save(session_factory, changed)
        self.states = states
        return table

    def _background_round(self, settings: Settings, snapshot: dict[str, Any]) -> None:
        try:
            states = self.probe(settings, snapshot)
        except Exception:   # noqa: BLE001 - report it; the next round is started anyway
            log.exception("health probes failed")
            return
        with self._lock:
            self._finished = states

    def _probe(self, model: str, b: dict, settings: Settings) -> tuple[str, str]:
        url = f"{b.get('scheme', 'http')}://{b['host']}:{b['port']}{b.get('base_path', '')}" \
              + probe_path(b["protocol"], model)
        headers = {"Host": b.get("host_header") or f"{b['host']}:{b['port']}"}
        if b.get("auth_header") and b["protocol"] == "anthropic":
            # its key as X-API-Key, as the gateway sends it (lua/sluice/config.lua)
            key = b["auth_header"]
            headers["X-API-Key"] = key[7:] if key.startswith("Bearer ") else key
            headers["anthropic-version"] = "2023-06-01"
        elif b.get("auth_header"):
            headers["Authorization"] = b["auth_header"]
        try:
            r = self.backends.get(url, BackendTLS.from_snapshot(b), headers=headers,
                                  timeout=settings.health_timeout)
        except requests.RequestException as exc:
            return "unreachable", type(exc).__name__
        try:
            doc = r.json()
        except ValueError:
            doc = None
        return classify(b["protocol"], r.status_code, doc)

    def _held(self, url: str) -> int:
        try:
            held = self.client.health_status(url).get("version")
        except GatewayError:
            return 0
        return held if isinstance(held, int) and not isinstance(held, bool) else 0

    def _save(self, session_factory: Callable[[], Session],
              changed: dict[str, tuple[str, str]]) -> None:
        now = datetime.now(timezone.utc)
        with session_factory() as session, session.begin():
            rows = {str(r.backend_id): r for r in session.scalars(
                select(BackendHealth).where(BackendHealth.backend_id.in_(
                    [int(b) for b in changed])))}
            for bid, (state, detail) in changed.items():
                log.info("backend %s is %s%s", bid, state, f" ({detail})" if detail else "")
                row = rows.get(bid)
                if row is None:
                    session.add(BackendHealth(backend_id=int(bid), state=state,
                                              detail=detail[:256], since=now))
                elif row.state != state or row.detail != detail[:256]:
                    if row.state != state:
                        row.since = now
                    row.state, row.detail = state, detail[:256]

    def _push(self, url: str, body: dict) -> bool:
        try:
            self.client.push_health(url, body)
        except GatewayError as exc:
            if exc.status == 409:   # it holds a newer round (another controller's clock)
                self.last_version = max(self.last_version, self._held(url))
            self._note(url, f"health push: {exc}")
            return False
        self._note(url, None)
        return True
