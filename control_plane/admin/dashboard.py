"""The dashboard: the fleet at a glance, refreshed in place from /admin/status.json."""
from __future__ import annotations

from typing import Any

from flask import Response, jsonify, render_template
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from control_plane.admin.blueprint import bp
from control_plane.api.schemas import iso
from control_plane.api.views import db
from control_plane.models import ApiKey, Backend, Consumer, Model
from control_plane.services.config_state import current_version
from control_plane.services.resources import GATEWAYS

REFRESH_MS = 2000


def status(session: Session) -> dict[str, Any]:
    """What the dashboard shows; the page and its JSON refresh share this."""
    version = current_version(session)
    gateways = []
    for gw in GATEWAYS.list(session):
        if gw.acked_version is None:
            state = "never acknowledged"
        elif gw.acked_version == version:
            state = "in sync"
        else:
            state = f"behind by {version - gw.acked_version}"
        gateways.append({"name": gw.name, "internal_url": gw.internal_url,
                         "acked_version": gw.acked_version, "state": state,
                         "in_sync": gw.acked_version == version,
                         "last_push_at": iso(gw.last_push_at), "last_error": gw.last_error})
    counts = {label: session.scalar(select(func.count()).select_from(table))
              for label, table in (("models", Model), ("backends", Backend),
                                   ("consumers", Consumer), ("keys", ApiKey))}
    drained = session.scalar(select(func.count()).select_from(Backend)
                             .where(Backend.weight == 0))
    return {"version": version, "gateways": gateways, "counts": counts,
            "drained_backends": drained}


@bp.get("/")
def dashboard() -> str:
    return render_template("dashboard.html", status=status(db()), refresh_ms=REFRESH_MS)


@bp.get("/status.json")
def status_json() -> Response:
    return jsonify(status(db()))
