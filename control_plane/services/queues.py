"""The gateways' queues at saturation, added up over the live fleet (GET /api/v1/queues).

Each gateway holds its own queue per model (lua/sluice/queue.lua) and shows its depth
in GET /internal/stats ("queues"); this reads every live gateway through the one
GatewayClient, in parallel, and sums per model and class. Nothing is stored: the
figure is a reading, as old as the request.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy.orm import Session

from control_plane.clients.gateway import GatewayClient, GatewayError
from control_plane.services import membership
from control_plane.services.config_state import current_version
from control_plane.services.resources import GATEWAYS
from control_plane.settings import Settings
from control_plane.tables.config import PRIORITIES


def live_gateways(session: Session, settings: Settings) -> dict[str, str]:
    """{name: internal_url} of the gateways that are members now."""
    version = current_version(session)
    now = membership.db_now(session)
    return {gw.name: gw.internal_url for gw in GATEWAYS.list(session)
            if membership.describe(gw, now, version, settings.gateway_ttl,
                                   settings.gone_after)["live"]}


def _depths(doc: dict[str, Any]) -> dict[str, dict[str, int]]:
    queues = doc.get("queues")
    out: dict[str, dict[str, int]] = {}
    if not isinstance(queues, dict):   # a gateway from before the queue: none
        return out
    for model, by_class in queues.items():
        if isinstance(by_class, dict):
            out[model] = {p: int(by_class.get(p) or 0) for p in PRIORITIES}
    return out


def collect(client: GatewayClient, gateways: dict[str, str]) -> dict[str, Any]:
    """Waiting requests per model and class (summed), per gateway, and the gateways
    that did not answer (name -> why)."""
    per_gateway: dict[str, dict[str, dict[str, int]]] = {}
    unreachable: dict[str, str] = {}
    if gateways:
        with ThreadPoolExecutor(max_workers=min(8, len(gateways))) as pool:
            futures = {name: pool.submit(client.stats, url) for name, url in gateways.items()}
            for name, future in futures.items():
                try:
                    per_gateway[name] = _depths(future.result())
                except GatewayError as exc:
                    unreachable[name] = str(exc)
    models: dict[str, dict[str, int]] = {}
    for depths in per_gateway.values():
        for model, by_class in depths.items():
            total = models.setdefault(model, {p: 0 for p in PRIORITIES} | {"total": 0})
            for p in PRIORITIES:
                total[p] += by_class[p]
                total["total"] += by_class[p]
    return {"sampled_at": time.time(), "models": models, "gateways": per_gateway,
            "unreachable": unreachable}
