"""Consumers' use of their plans' quotas, from usage_daily (collected from every
gateway's counters by the controller; docs/contracts.md "Usage").

A quota field (daily_requests, monthly_requests, monthly_tokens) is counted per plan
scope, as the gateway counts it: a model whose `model_overrides` entry names the field
has its own counter (scope = the model's name, its limit possibly null: unlimited),
every other model shares the plan's (scope "*").
"""
from __future__ import annotations

from datetime import date, datetime, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.services.errors import NotFound
from control_plane.tables.config import Consumer, Plan
from control_plane.tables.records import UsageDaily

QUOTAS = {  # plan field -> (period, what is counted)
    "daily_requests": ("today", "requests"),
    "monthly_requests": ("this_month", "requests"),
    "monthly_tokens": ("this_month", "total_tokens"),
}
COUNTS = ("requests", "prompt_tokens", "completion_tokens", "total_tokens",
          "audio_ms", "input_chars", "images", "session_seconds")
MAX_ROWS = 10000


def _zero() -> dict[str, int]:
    return dict.fromkeys(COUNTS, 0)


def _add(into: dict[str, int], row: Any) -> None:
    for f in COUNTS:
        into[f] += int(getattr(row, f))


def quotas(plan: Plan | None, per_model: dict[str, dict[str, dict[str, int]]]
           ) -> list[dict[str, Any]]:
    """Limit, used and remaining per quota field and scope of `plan`."""
    if plan is None:
        return []
    overrides = plan.model_overrides or {}
    out = []
    for field, (period, count) in QUOTAS.items():
        own = {m for m, o in overrides.items() if isinstance(o, dict) and field in o}
        scopes = [("*", getattr(plan, field),
                   sum(u[period][count] for m, u in per_model.items() if m not in own))]
        scopes += [(m, overrides[m][field], per_model.get(m, {}).get(period, {}).get(count, 0))
                   for m in sorted(own)]
        for scope, limit, used in scopes:
            if limit is None:
                continue
            out.append({"quota": field, "scope": scope, "limit": limit, "used": used,
                        "remaining": max(limit - used, 0)})
    return out


def for_consumer(session: Session, consumer_id: int, now: datetime | None = None
                 ) -> dict[str, Any]:
    """Today's and this month's usage of one consumer, against its plan's quotas."""
    consumer = session.get(Consumer, consumer_id)
    if consumer is None:
        raise NotFound(f"no consumer with id {consumer_id}")
    plan = session.get(Plan, consumer.plan_id) if consumer.plan_id is not None else None
    today = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).date()
    rows = session.scalars(select(UsageDaily).where(
        UsageDaily.consumer_id == consumer_id, UsageDaily.day >= today.replace(day=1),
        UsageDaily.day <= today))
    totals = {"today": _zero(), "this_month": _zero()}
    per_model: dict[str, dict[str, dict[str, int]]] = {}
    for row in rows:
        m = per_model.setdefault(row.model, {"today": _zero(), "this_month": _zero()})
        periods = ("today", "this_month") if row.day == today else ("this_month",)
        for p in periods:
            _add(totals[p], row)
            _add(m[p], row)
    return {"consumer": {"id": consumer.id, "name": consumer.name},
            "plan": {"id": plan.id, "name": plan.name} if plan else None,
            "day": today.isoformat(), "month": today.strftime("%Y-%m"),
            **totals, "models": dict(sorted(per_model.items())),
            "quotas": quotas(plan, per_model)}


def daily(session: Session, since: date, until: date, consumer_id: int | None = None,
          model: str | None = None) -> dict[str, Any]:
    """usage_daily rows (oldest day first) and their totals, at most MAX_ROWS rows."""
    stmt = (select(UsageDaily, Consumer.name)
            .outerjoin(Consumer, Consumer.id == UsageDaily.consumer_id)
            .where(UsageDaily.day >= since, UsageDaily.day <= until))
    if consumer_id is not None:
        stmt = stmt.where(UsageDaily.consumer_id == consumer_id)
    if model is not None:
        stmt = stmt.where(UsageDaily.model == model)
    stmt = stmt.order_by(UsageDaily.day, UsageDaily.consumer_id, UsageDaily.model)
    items, totals, truncated = [], _zero(), False
    for row, name in session.execute(stmt.limit(MAX_ROWS + 1)):
        if len(items) == MAX_ROWS:
            truncated = True
            break
        _add(totals, row)
        items.append({"consumer_id": row.consumer_id, "consumer": name, "model": row.model,
                      "day": row.day.isoformat(), **{f: getattr(row, f) for f in COUNTS}})
    return {"since": since.isoformat(), "until": until.isoformat(), "items": items,
            "totals": totals, "truncated": truncated}


def today_utc() -> date:
    return datetime.now(timezone.utc).date()
