"""The controller's usage step, once per SLUICE_USAGE_INTERVAL (≈1 s):

    GET /internal/usage of every gateway ─> usage_sync.ingest (one transaction each)
    usage_daily ─> usage_sync.fleet ─> per gateway: fleet minus its own reports
    -> POST /internal/usage {"boot", "version": <unix ms>, "day", "month", "usage"}

A push goes out only when it would change something: its usage differs from the last
one the gateway took, the gateway lost it (restart: another boot, seed_version 0) or
it was applied under another snapshot (plans may have changed). Errors are logged
when they change, not each tick.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.orm import Session

from control_plane.clients.gateway import GatewayClient, GatewayError
from control_plane.controller.fanout import Notes, parallel
from control_plane.services import usage_sync
from control_plane.settings import Settings
from control_plane.tables.config import Gateway

log = logging.getLogger("sluice.controller.usage")


class UsageLoop:
    def __init__(self, client: GatewayClient, clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.clock = clock
        self.next_at = 0.0
        self.last_version = 0
        self._pushed: dict[int, tuple[str, Any, int]] = {}   # gateway id -> (boot, usage, version)
        self._note = Notes(log)

    def due(self) -> bool:
        return self.clock() >= self.next_at

    def run(self, settings: Settings, session_factory: Callable[[], Session],
            gateways: list[Gateway]) -> int:
        """One usage step; returns how many gateways were pushed to."""
        self.next_at = self.clock() + settings.usage_interval
        reports = parallel(gateways, self._read)
        today = datetime.now(timezone.utc).date()
        own: dict[int, tuple[dict, dict]] = {}
        for g, report in zip(gateways, reports):
            if report is None:
                continue
            boot, started, counters = report[0]
            with session_factory() as session:
                mine = usage_sync.ingest(session, g.id, boot, started, counters, today)
            if mine is not None:
                own[g.id] = (mine, report[1])
        if not own:
            return 0
        with session_factory() as session:
            fleet = usage_sync.fleet(session, today)
        todo = []
        for g in gateways:
            if g.id not in own:
                continue
            mine, body = own[g.id]
            usage = usage_sync.seed(fleet, mine, today)
            last = self._pushed.get(g.id)
            if (last is not None and last[0] == body["boot"] and last[1] == usage
                    and body.get("seed_version") == last[2]
                    and body.get("seed_snapshot") == body.get("snapshot_version")):
                continue
            # above what the gateway holds: another controller's clock may run ahead
            held = body.get("seed_version")
            held = held if isinstance(held, int) and not isinstance(held, bool) else 0
            self.last_version = max(int(time.time() * 1000), self.last_version + 1, held + 1)
            todo.append((g, {"boot": body["boot"], "version": self.last_version,
                             "day": today.strftime("%Y%m%d"), "month": today.strftime("%Y%m"),
                             "usage": usage}))
        done = parallel(todo, lambda t: self._push(t[0], t[1]))
        for (g, push), ok in zip(todo, done):
            if ok:
                self._pushed[g.id] = (push["boot"], push["usage"], push["version"])
            else:
                self._pushed.pop(g.id, None)
        return sum(1 for ok in done if ok)

    def _read(self, g: Gateway) -> tuple | None:
        url = g.internal_url
        try:
            body = self.client.usage(url)
            parsed = usage_sync.parse_report(body)
        except (GatewayError, ValueError) as exc:
            self._note("read " + url, f"usage read {url}: {type(exc).__name__}: {exc}")
            return None
        self._note("read " + url, None)
        return parsed, body

    def _push(self, g: Gateway, body: dict) -> bool:
        url = g.internal_url
        try:
            self.client.push_usage(url, body)
        except GatewayError as exc:
            self._note("push " + url, f"usage push: {exc}")
            return False
        self._note("push " + url, None)
        return True
