"""Probes for orchestrators: `GET /healthz` (liveness) and `GET /readyz` (readiness).

Outside /api/, so they need no token (a kubelet has none), and they answer nothing
an anonymous caller should not know: no versions, hosts, URLs or driver messages.
"""
from __future__ import annotations

import logging

from flask import Blueprint, Response, current_app, jsonify
from sqlalchemy import exc as sa_exc

from control_plane.api.errors import (DATABASE_RETRY_AFTER, describe_database_error,
                                      error_response)

log = logging.getLogger(__name__)

bp = Blueprint("probes", __name__)

# How long `SELECT 1` may take before the API counts as not ready.
READY_QUERY_TIMEOUT_MS = 2000


@bp.get("/healthz")
def healthz() -> Response:
    """Alive while the process serves requests; the database plays no part."""
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz() -> Response:
    """Ready when the database answers `SELECT 1` within the connect timeout
    (SLUICE_DB_CONNECT_TIMEOUT) and READY_QUERY_TIMEOUT_MS."""
    engine = current_app.extensions["sluice"].engine
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {READY_QUERY_TIMEOUT_MS}")
            conn.exec_driver_sql("SELECT 1")
    except sa_exc.SQLAlchemyError as exc:
        log.warning("not ready: %s", describe_database_error(exc))
        return error_response(503, "not ready: the database does not answer",
                              error_type="database_unavailable",
                              retry_after=DATABASE_RETRY_AFTER)
    return jsonify({"status": "ready", "database": "ok"})
