"""Admin API for what happened: inference logs (search, per-model aggregates), the
audit trail (who changed what) and scaling signals per model.

Routes join the `api` blueprint of views.py; app.py imports this module before the
blueprint is registered.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from flask import Flask, Response, current_app, g, jsonify, request

from control_plane.api import identity
from control_plane.api.errors import request_id
from control_plane.api.validation import ValidationError, described
from control_plane.api.views import bp, db
from control_plane.clients.gateway import GatewayClient
from control_plane.services import (admin_tokens, audit, health, inference_logs, log_chain,
                                    queues, scaling, telemetry)

# X-Sluice-Actor: who is behind the shared admin token (a CLI's $USER, the UI's user).
ACTOR_RE = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")

DEFAULT_STATS_WINDOW = timedelta(hours=1)


@described({"anyOf": [{"type": "string", "format": "date-time"}, {"type": "number"}],
            "description": "ISO 8601 (UTC when no offset is given) or Unix seconds"})
def parse_time(raw: str) -> datetime:
    """ISO 8601 (UTC when no offset is given) or Unix seconds."""
    try:
        return datetime.fromtimestamp(float(raw), tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        pass
    # an unencoded "+02:00" arrives as " 02:00"
    raw = re.sub(r" (\d\d:?\d\d)$", r"+\1", raw.strip()).replace("Z", "+00:00")
    try:
        t = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError("must be ISO 8601 (2026-11-29T17:00:00Z) or Unix seconds") from None
    if t.tzinfo is None:
        return t.replace(tzinfo=timezone.utc)
    try:
        # in UTC: PostgreSQL refuses offsets past 15:59 that Python takes (up to 23:59)
        return t.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError("is out of range") from None


def _int_in(lo: int, hi: int):
    @described({"type": "integer", "minimum": lo, "maximum": hi})
    def parse(raw: str) -> int:
        try:
            v = int(raw)
        except ValueError:
            raise ValueError("must be an integer") from None
        if not lo <= v <= hi:
            raise ValueError(f"must be between {lo} and {hi}")
        return v
    return parse


@described({"type": "string", "minLength": 1, "maxLength": 256, "pattern": "^[^\\x00]+$"})
def _text(raw: str) -> str:
    # PostgreSQL takes no NUL in a string parameter: a 422 here, not a 500 there
    if not raw or len(raw) > 256 or "\x00" in raw:
        raise ValueError("must be 1 to 256 characters, none of them NUL")
    return raw


def query_args(parsers: dict) -> dict:
    """Parse the query string with `parsers` (name -> parser); unknown names are an
    error too, so a typo never silently widens a search."""
    out, errors = {}, {}
    for name in request.args:
        if name not in parsers:
            errors[name] = "is not a known parameter (" + ", ".join(sorted(parsers)) + ")"
    for name, parse in parsers.items():
        raw = request.args.get(name)
        if raw is None:
            continue
        try:
            out[name] = parse(raw)
        except ValueError as exc:
            errors[name] = str(exc)
    if errors:
        raise ValidationError(errors, "invalid query parameters")
    return out


LOG_PARAMS = {"request_id": _text, "consumer": _text, "model": _text,
              "status": _int_in(100, 599), "since": parse_time, "until": parse_time,
              "before_id": _int_in(1, 2**63 - 1),
              "limit": _int_in(1, inference_logs.MAX_LIMIT)}


@bp.get("/logs")
def logs() -> Response:
    q = inference_logs.LogQuery(**query_args(LOG_PARAMS))
    rows = inference_logs.search(db(), q)
    body = {"items": [inference_logs.render(r) for r in rows]}
    if len(rows) == q.limit:
        body["next_before_id"] = rows[-1].id
    return jsonify(body)


STATS_PARAMS = {"since": parse_time, "until": parse_time}


@bp.get("/logs/stats")
def logs_stats() -> Response:
    args = query_args(STATS_PARAMS)
    until = args.get("until") or datetime.now(timezone.utc)
    try:
        since = args.get("since") or until - DEFAULT_STATS_WINDOW
    except OverflowError:
        raise ValidationError({"until": "is too early for a window of an hour"},
                              "invalid query parameters") from None
    if since >= until:
        raise ValidationError({"since": "must be before until"}, "invalid query parameters")
    return jsonify({"since": since.isoformat(), "until": until.isoformat(),
                    "models": inference_logs.stats(db(), since, until)})


AUDIT_PARAMS = {"resource": _text, "resource_id": _int_in(1, 2**63 - 1), "actor": _text,
                "action": _text, "since": parse_time, "until": parse_time,
                "before_id": _int_in(1, 2**63 - 1), "limit": _int_in(1, audit.MAX_LIMIT)}


@bp.get("/audit")
def audit_log() -> Response:
    q = audit.AuditQuery(**query_args(AUDIT_PARAMS))
    rows = audit.search(db(), q)
    body = {"items": [audit.render(r) for r in rows]}
    if len(rows) == q.limit:
        body["next_before_id"] = rows[-1].id
    return jsonify(body)


ANCHOR_PARAMS = {"chain": _text, "after_id": _int_in(0, 2**63 - 1),
                 "limit": _int_in(1, audit.MAX_LIMIT)}
VERIFY_PARAMS = {"chain": _text}


@bp.get("/audit/anchors")
def audit_anchors() -> Response:
    """Anchors of the hash chains, oldest first: what an operator keeps elsewhere."""
    args = query_args(ANCHOR_PARAMS)
    limit = args.get("limit", audit.MAX_LIMIT)
    items = log_chain.anchors(db().connection(), args.get("chain"), args.get("after_id"),
                              limit)
    body = {"items": items}
    if len(items) == limit:
        body["next_after_id"] = items[-1]["id"]
    return jsonify(body)


@bp.get("/audit/verify")
def audit_verify() -> Response:
    """Walk every chain (or `chain`); name the first row altered, removed or inserted."""
    args = query_args(VERIFY_PARAMS)
    try:
        chains = log_chain.verify(db().get_bind(), args.get("chain"))
    except KeyError:
        raise ValidationError({"chain": "is not a chain (audit, inference:<source>)"},
                              "invalid query parameters") from None
    return jsonify({"ok": all(c["ok"] for c in chains), "chains": chains})


@bp.get("/scaling")
def scaling_signals() -> Response:
    query_args({})
    settings = current_app.config["SLUICE_SETTINGS"]
    t = scaling.thresholds(settings)

    def gpu(session):
        return telemetry.model_utilization(session, settings.telemetry_stale_after)

    return jsonify({"window_seconds": t.window_seconds,
                    "models": scaling.recommend(db(), t, gpu=gpu)})


@bp.get("/health")
def backend_health() -> Response:
    """Backend and model readiness from the controller's health checks."""
    query_args({})
    return jsonify(health.report(db()))


@bp.get("/queues")
def queue_depths() -> Response:
    """Requests waiting in the gateways' queues at saturation, per model and class,
    read from every live gateway now (the admin process needs SLUICE_GATEWAY_TOKEN)."""
    query_args({})
    settings = current_app.config["SLUICE_SETTINGS"]
    gateways = queues.live_gateways(db(), settings)
    if not settings.gateway_token:
        return jsonify({"sampled_at": None, "models": {}, "gateways": {},
                        "unreachable": {name: "no gateway token (SLUICE_GATEWAY_TOKEN)"
                                        for name in gateways}})
    client = GatewayClient.from_settings(settings)
    try:
        return jsonify(queues.collect(client, gateways))
    finally:
        client.close()


def _set_actor() -> None:
    if not request.path.startswith("/api/"):
        return
    token = identity.caller_token()
    if token is not None:   # the user and the token, never "the admin token"
        actor = admin_tokens.actor(token)
    else:
        name = request.headers.get("X-Sluice-Actor", "")
        actor = "admin-token" + (":" + name if ACTOR_RE.match(name) else "")
    audit.set_actor(actor, request_id())
    g.audit_actor = actor


def _clear_actor(_exc: BaseException | None = None) -> None:
    if g.pop("audit_actor", None) is not None:
        audit.set_actor("system", None)   # a pooled thread must not keep the last actor


def init_app(app: Flask) -> None:
    """Runs after the admin-token check (registered after views.init_app)."""
    app.before_request(_set_actor)
    app.teardown_appcontext(_clear_actor)
