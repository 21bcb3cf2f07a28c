"""The dashboard: the fleet at a glance, refreshed in place from /admin/status.json.

Traffic figures come from the gateways' own metrics (read with the gateway token at
each refresh); the page's script turns two readings into rates and percentiles.
"""
from __future__ import annotations

import time
from typing import Any

from flask import Response, current_app, jsonify, render_template
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from control_plane.admin.blueprint import bp
from control_plane.api.schemas import iso
from control_plane.api.views import db
from control_plane.clients.gateway import GatewayClient
from control_plane.services import controllers, fleet_metrics, membership, telemetry
from control_plane.services.config_state import current_version
from control_plane.services.resources import BACKENDS, GATEWAYS, MODELS
from control_plane.tables.config import ApiKey, Backend, Consumer, Model

REFRESH_MS = 2000


def status(session: Session) -> dict[str, Any]:
    """What the dashboard shows; the page and its JSON refresh share this."""
    version = current_version(session)
    settings = current_app.config["SLUICE_SETTINGS"]
    now = membership.db_now(session)
    gateways, live = [], {}
    for gw in GATEWAYS.list(session):
        member = membership.describe(gw, now, version, settings.gateway_ttl,
                                     settings.gone_after)
        if not member["live"]:
            state = member["state"]
        elif gw.acked_version is None:
            state = "never acknowledged"
        elif gw.acked_version == version:
            state = "in sync"
        else:
            state = f"behind by {version - gw.acked_version}"
        if member["live"]:
            live[gw.name] = gw.internal_url
        gateways.append({"name": gw.name, "internal_url": gw.internal_url,
                         "acked_version": gw.acked_version, "state": state,
                         "in_sync": member["live"] and gw.acked_version == version,
                         "live": member["live"], "registered": gw.registered,
                         "last_push_at": iso(gw.last_push_at), "last_error": gw.last_error})
    on_current = sum(1 for g in gateways if g["in_sync"])
    fleet = {"live": len(live), "on_current_version": on_current,
             "text": f"{on_current} of {len(live)}",
             "controller": controllers.holder_name(session)}
    counts = {label: session.scalar(select(func.count()).select_from(table))
              for label, table in (("models", Model), ("backends", Backend),
                                   ("consumers", Consumer), ("keys", ApiKey))}
    drained = session.scalar(select(func.count()).select_from(Backend)
                             .where(Backend.weight == 0))
    gpus = _gpus_by_backend(session)
    backends = [{"name": b.name, "model": b.model.name, "weight": b.weight,
                 "enabled": b.enabled, "gpus": gpus.get(b.name, []),
                 "state": "disabled" if not b.enabled else "drained" if b.weight == 0
                 else "serving"} for b in BACKENDS.list(session)]
    return {"version": version, "gateways": gateways, "fleet": fleet, "counts": counts,
            "drained_backends": drained, "backends": backends,
            "models": [m.name for m in MODELS.list(session)],
            # stale and gone gateways are not asked: they would only time out
            "traffic": _traffic(live)}


def _gpus_by_backend(session: Session) -> dict[str, list[dict[str, Any]]]:
    """The latest telemetry of the GPUs that serve each backend (agent's mapping)."""
    stale_after = current_app.config["SLUICE_SETTINGS"].telemetry_stale_after
    out: dict[str, list[dict[str, Any]]] = {}
    for gpu in telemetry.latest(session, stale_after):
        brief = {k: gpu[k] for k in ("host", "index", "gpu_class", "memory_free_mb",
                                     "memory_total_mb", "utilization_pct", "stale")}
        for name in gpu["backends"] or ():
            out.setdefault(name, []).append(brief)
    return out


def _traffic(gateways: dict[str, str]) -> dict[str, Any] | None:
    """Cumulative counters summed over the gateways that answered; None when this
    process has no gateway token to read them with."""
    settings = current_app.config["SLUICE_SETTINGS"]
    if not settings.gateway_token:
        return None
    client = GatewayClient.from_settings(settings)
    try:
        texts, errors = fleet_metrics.scrape(client, gateways)
    finally:
        client.close()
    return {"sampled_at": time.time(), "unreachable": errors,
            **fleet_metrics.summarize(texts)}


@bp.get("/")
def dashboard() -> str:
    settings = current_app.config["SLUICE_SETTINGS"]
    return render_template("dashboard.html", status=status(db()), refresh_ms=REFRESH_MS,
                           bootstrap_token_on=settings.admin_token_enabled)


@bp.get("/status.json")
def status_json() -> Response:
    return jsonify(status(db()))
