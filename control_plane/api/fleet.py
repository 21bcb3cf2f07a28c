"""The fleet in the admin API: gateways registering themselves (POST
/gateways/register, with the gateway token, each heartbeat included), the
membership fields every gateway is rendered with, and the controllers.

    POST /api/v1/gateways/register   {"name", "internal_url", "boot_id",
                                      "sluice_version", "leaving"?}
        -> 200 {"id", "name", "state", "joined", "heartbeat_interval_s", "ttl_s"}
    GET  /api/v1/controllers         {"active": id | null, "items": [...]}
    GET  /api/v1/fleet               the summary the dashboard tile shows
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify
from sqlalchemy.orm import Session

from control_plane.api.errors import ApiError
from control_plane.api.schemas import GATEWAY_REGISTRATION, GatewaySchema, iso
from control_plane.api.validation import validate
from control_plane.services import controllers, membership
from control_plane.services.config_state import current_version
from control_plane.services.errors import Conflict
from control_plane.services.resources import GATEWAYS
from control_plane.tables.config import Gateway

log = logging.getLogger("sluice.api.fleet")

REGISTER_PATH = "/api/v1/gateways/register"
_schema = GatewaySchema()


def gateway_renderer(db: Callable[[], Session]) -> Callable[[Gateway], dict[str, Any]]:
    """A gateway's JSON with its membership fields; what they are judged against (the
    database's now, the current version, the TTLs) is read once per request."""
    def context() -> tuple[Any, int, float, float]:
        if "fleet_context" not in g:
            settings = current_app.config["SLUICE_SETTINGS"]
            session = db()
            g.fleet_context = (membership.db_now(session), current_version(session),
                               settings.gateway_ttl, settings.gone_after)
            session.commit()   # end the read: views that write begin their own
        return g.fleet_context

    def render(row: Gateway) -> dict[str, Any]:
        now, current, ttl, gone_after = context()
        return {**_schema.render(row),
                **membership.describe(row, now, current, ttl, gone_after)}
    return render


def summary(session: Session, ttl: float, gone_after: float) -> dict[str, Any]:
    now, current = membership.db_now(session), current_version(session)
    rows = [(r, membership.describe(r, now, current, ttl, gone_after))
            for r in GATEWAYS.list(session)]
    live = [d for _, d in rows if d["live"]]
    return {"current_version": current, "live": len(live),
            "on_current_version": sum(1 for d in live if d["on_current_version"]),
            "stale": sum(1 for _, d in rows if d["state"] == "stale"),
            "gone": sum(1 for _, d in rows if d["state"] == "gone"),
            "controller": controllers.holder_name(session)}


def register(bp: Blueprint, db: Callable[[], Session], json_body: Callable[[], Any]) -> None:

    @bp.post("/gateways/register")
    def register_gateway() -> Response:
        data = validate(json_body(), GATEWAY_REGISTRATION)
        reg = membership.Registration(
            name=data["name"], internal_url=data["internal_url"], boot_id=data["boot_id"],
            sluice_version=data["sluice_version"], leaving=bool(data.get("leaving")))
        settings = current_app.config["SLUICE_SETTINGS"]
        try:
            row, joined = membership.register(db(), reg, settings.gateway_ttl)
        except Conflict as exc:
            raise ApiError(409, str(exc)) from None
        if joined or reg.leaving:
            log.info("gateway %s %s at %s (boot %s, sluice %s)", row.name,
                     "left" if reg.leaving else "joined", row.internal_url, row.boot_id,
                     row.sluice_version)
        return jsonify({"id": row.id, "name": row.name, "joined": joined,
                        "state": "gone" if reg.leaving else "live",
                        "heartbeat_interval_s": settings.heartbeat_interval,
                        "ttl_s": settings.gateway_ttl})

    @bp.get("/controllers")
    def list_controllers() -> Response:
        found = controllers.listing(db())
        for c in found["items"]:
            for key in ("started_at", "last_seen_at", "active_since"):
                c[key] = iso(c[key])
        return jsonify(found)

    @bp.get("/fleet")
    def fleet_summary() -> Response:
        settings = current_app.config["SLUICE_SETTINGS"]
        return jsonify(summary(db(), settings.gateway_ttl, settings.gone_after))
