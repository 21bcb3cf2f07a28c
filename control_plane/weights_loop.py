"""The controller's weight step, once per SLUICE_WEIGHTS_INTERVAL (≈1 s):

    scrape GET /internal/stats of every gateway  ─┐
    free GPU memory per backend (fresh telemetry) ─┤
    free capacity from backends' /metrics (fresh) ─┼─> weights.compute() per pool
    coefficients per model (NULL: settings)       ─┘
    -> POST /internal/weights {"version": <unix ms>, "weights": {...}} to every gateway

A gateway that cannot be scraped still gets the table (computed from the others'
stats); one that cannot take it keeps its last table until it decays to the static
weights (lua/sluice/weights.lua). Errors are logged when they change, not each tick.
A backend with a fresh Prometheus scrape (scraper.py) takes that figure over its
agent telemetry: the operator configured it for that backend on purpose.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import requests
from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.fanout import Notes, parallel
from control_plane.models import Gateway, Model
from control_plane.scraper import Scraper
from control_plane.services import scrapes, telemetry
from control_plane.services.weights import Coefficients, OutcomeWindow, compute, pools_of
from control_plane.settings import Settings

log = logging.getLogger("sluice.controller.weights")



class WeightsLoop:
    def __init__(self, http: requests.Session, clock: Callable[[], float] = time.monotonic):
        self.http = http
        self.clock = clock
        self.window = OutcomeWindow()
        self.next_at = 0.0
        self.last_table: dict[str, int] = {}
        self.last_version = 0
        self._note = Notes(log)
        self.scraper = Scraper()

    def due(self) -> bool:
        return self.clock() >= self.next_at

    def run(self, settings: Settings, session_factory: Callable[[], Session],
            gateways: list[Gateway], snapshot: dict[str, Any]) -> dict[str, int]:
        """One weight step; returns the table pushed."""
        self.next_at = self.clock() + settings.weights_interval
        self.scraper.kick(session_factory)
        urls = [g.internal_url for g in gateways]
        headers = {"Authorization": f"Bearer {settings.gateway_token}"}
        scraped = parallel(urls, lambda u: self._scrape(u, headers, settings))
        now = self.clock()
        latencies: dict[str, list[float]] = {}
        for url, stats in zip(urls, scraped):
            if stats is None:
                continue
            for bid, s in stats.items():
                self.window.update(url, bid, int(s.get("successes", 0)),
                                   int(s.get("failures", 0)), now)
                latencies.setdefault(bid, []).extend(s.get("latency_ms") or [])
        with session_factory() as session:
            free = {name: m.free_fraction for name, m in
                    telemetry.backend_memory(session, settings.telemetry_stale_after).items()}
            free.update(scrapes.fresh_free(session, settings.telemetry_stale_after))
            coefficients = {name: Coefficients.of(c, None) for name, c in session.execute(
                select(Model.name, Model.weight_coefficients)
                .where(Model.weight_coefficients.is_not(None)))}
        default = Coefficients(*settings.weight_coefficients)
        table = compute(pools_of(snapshot), coefficients, default, free, self.window,
                        latencies, now)
        # unix ms: increases across controller restarts, so gateways accept it
        version = max(int(time.time() * 1000), self.last_version + 1)
        body = {"version": version, "weights": table,
                "hold_s": max(5.0, 5 * settings.weights_interval)}
        parallel(urls, lambda u: self._push(u, headers, body, settings))
        if table != self.last_table:
            log.info("weights version=%d %s", version,
                     " ".join(f"{k}={v}" for k, v in sorted(table.items(), key=lambda kv:
                                                             int(kv[0]))[:50]))
        self.last_table, self.last_version = table, version
        return table

    def _scrape(self, url: str, headers: dict, settings: Settings) -> dict | None:
        try:
            r = self.http.get(url + "/internal/stats", headers=headers,
                              timeout=settings.push_timeout)
            r.raise_for_status()
            backends = r.json()["backends"]
            if not isinstance(backends, dict):
                raise ValueError("backends is not an object")
        except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
            self._note("stats " + url, f"stats scrape {url}: {type(exc).__name__}: {exc}")
            return None
        self._note("stats " + url, None)
        return backends

    def _push(self, url: str, headers: dict, body: dict, settings: Settings) -> bool:
        try:
            r = self.http.post(url + "/internal/weights", json=body, headers=headers,
                               timeout=settings.push_timeout)
            if r.status_code != 200:
                raise requests.HTTPError(f"HTTP {r.status_code}: {r.text[:200]}")
        except requests.RequestException as exc:
            self._note("weights " + url, f"weights push {url}: {exc}")
            return False
        self._note("weights " + url, None)
        return True
