"""What happened: the audit trail and the inference log, searchable, newest first.

The filters are the admin API's (`/api/v1/audit`, `/api/v1/logs`), parsed by the
same parsers; an empty filter field means "any".
"""
from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from flask import render_template, request

from control_plane.admin.blueprint import bp
from control_plane.api.observability import AUDIT_PARAMS, LOG_PARAMS
from control_plane.api.views import db
from control_plane.services import audit, inference_logs

PAGE_SIZE = 50
STATS_WINDOW = timedelta(hours=1)


def _filters(parsers: dict[str, Callable[[str], Any]], names: tuple[str, ...]
             ) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """(parsed filters, per-field errors, the raw values to show in the form)."""
    raw = {name: request.args.get(name, "").strip() for name in names + ("before_id",)}
    clean, errors = {}, {}
    for name, value in raw.items():
        if not value:
            continue
        try:
            clean[name] = parsers[name](value)
        except ValueError as exc:
            errors[name] = str(exc)
    return clean, errors, raw


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True) \
        if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "…"


def changes(entry: Any) -> list[tuple[str, str, str]]:
    """(field, before, after) for what an entry changed; one side is empty for a
    create or a delete."""
    before, after = entry.before or {}, entry.after or {}
    out = []
    for field in sorted(set(before) | set(after)):
        if field == "id" or before.get(field) == after.get(field):
            continue
        out.append((field, _short(before[field]) if field in before else "",
                    _short(after[field]) if field in after else ""))
    return out


AUDIT_FILTERS = ("resource", "actor", "action", "since", "until")
LOG_FILTERS = ("request_id", "consumer", "model", "status", "since", "until")


@bp.get("/audit/")
def audit_trail():
    clean, errors, raw = _filters(AUDIT_PARAMS, AUDIT_FILTERS)
    rows = [] if errors else audit.search(db(), audit.AuditQuery(limit=PAGE_SIZE, **clean))
    older = rows[-1].id if len(rows) == PAGE_SIZE else None
    return render_template("audit.html", rows=rows, errors=errors, values=raw,
                           older=older, changes=changes, utc=timezone.utc,
                           resources=sorted({"model", "backend", "consumer", "key",
                                             "gateway", "plan", "JWT issuer"}))


@bp.get("/logs/")
def inference_log():
    clean, errors, raw = _filters(LOG_PARAMS, LOG_FILTERS)
    rows = [] if errors else inference_logs.search(
        db(), inference_logs.LogQuery(limit=PAGE_SIZE, **clean))
    older = rows[-1].id if len(rows) == PAGE_SIZE else None
    until = datetime.now(timezone.utc)
    stats = inference_logs.stats(db(), until - STATS_WINDOW, until)
    return render_template("logs.html", rows=rows, errors=errors, values=raw, older=older,
                           stats=stats, utc=timezone.utc)
