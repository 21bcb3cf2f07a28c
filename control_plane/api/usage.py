"""Admin API for usage against quotas, from usage_daily (what the controller collects
from every gateway's counters):

    GET /api/v1/consumers/<id>/usage    today and this month against the plan's quotas
    GET /api/v1/usage?consumer=&model=&from=&to=    per consumer, model and UTC day

Routes join the `api` blueprint of views.py; app.py imports this module before the
blueprint is registered.
"""
from __future__ import annotations

from datetime import date

from flask import Response, jsonify

from control_plane.api.observability import _int_in, _text, query_args
from control_plane.api.validation import ValidationError, described
from control_plane.api.views import bp, db
from control_plane.services import quota_usage

MAX_DAYS = 366


@described({"type": "string", "format": "date"})
def _day(raw: str) -> date:
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise ValueError("must be a date, YYYY-MM-DD") from None


@bp.get("/consumers/<int:id>/usage")
def consumer_usage(id: int) -> Response:
    query_args({})
    return jsonify(quota_usage.for_consumer(db(), id))


USAGE_PARAMS = {"consumer": _int_in(1, 2**31 - 1), "model": _text, "from": _day, "to": _day}


@bp.get("/usage")
def usage_daily() -> Response:
    args = query_args(USAGE_PARAMS)
    until = args.get("to") or quota_usage.today_utc()
    since = args.get("from") or until.replace(day=1)
    if since > until:
        raise ValidationError({"from": "must not be after to"}, "invalid query parameters")
    if (until - since).days >= MAX_DAYS:
        raise ValidationError({"from": f"at most {MAX_DAYS} days before to"},
                              "invalid query parameters")
    return jsonify(quota_usage.daily(db(), since, until, args.get("consumer"),
                                     args.get("model")))
