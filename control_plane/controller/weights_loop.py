"""The controller's weight step, once per SLUICE_WEIGHTS_INTERVAL (≈1 s):

    scrape GET /internal/stats of every gateway  ─┐
    free GPU memory per backend (fresh telemetry) ─┤
    free capacity from backends' /metrics (fresh) ─┼─> weights.compute() per pool
    coefficients per model (NULL: settings)       ─┘
    -> POST /internal/weights {"version": <unix ms>, "weights": {...},
                               "saturated": [ids of backends with <= 2 % free]}

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

from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.clients.gateway import GatewayClient, GatewayError
from control_plane.controller.fanout import Notes, parallel
from control_plane.controller.scraper import Scraper
from control_plane.services import scrapes, telemetry
from control_plane.services.weights import (Coefficients, OutcomeWindow, compute, pools_of,
                                            saturated)
from control_plane.settings import Settings
from control_plane.tables.config import Gateway, Model

log = logging.getLogger("sluice.controller.weights")


class WeightsLoop:
    def __init__(self, client: GatewayClient, clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.clock = clock
        self.window = OutcomeWindow()
        self.next_at = 0.0
        self.last_table: dict[str, int] = {}
        self.last_version = 0
        self._held = 0   # the highest weights version a gateway said it holds
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
        scraped = parallel(urls, self._scrape)
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
        pools = pools_of(snapshot)
        table = compute(pools, coefficients, default, free, self.window, latencies, now)
        # unix ms: increases across controller restarts, so gateways accept it; and
        # above any version a gateway holds (another controller's clock may run ahead)
        version = max(int(time.time() * 1000), self.last_version + 1, self._held + 1)
        body = {"version": version, "weights": table,
                "hold_s": max(5.0, 5 * settings.weights_interval),
                # GPUs full: the gateways queue instead of sending more
                "saturated": saturated(pools, free)}
        parallel(urls, lambda u: self._push(u, body))
        if table != self.last_table:
            log.info("weights version=%d %s", version,
                     " ".join(f"{k}={v}" for k, v in sorted(table.items(), key=lambda kv:
                                                             int(kv[0]))[:50]))
        self.last_table, self.last_version = table, version
        return table

    def _scrape(self, url: str) -> dict | None:
        try:
            doc = self.client.stats(url)
        except GatewayError as exc:
            self._note("stats " + url, f"stats scrape: {exc}")
            return None
        self._note("stats " + url, None)
        held = doc.get("weights_version")
        if isinstance(held, int) and not isinstance(held, bool):
            self._held = max(self._held, held)
        return doc["backends"]

    def _push(self, url: str, body: dict) -> bool:
        try:
            self.client.push_weights(url, body)
        except GatewayError as exc:
            self._note("weights " + url, f"weights push: {exc}")
            return False
        self._note("weights " + url, None)
        return True
