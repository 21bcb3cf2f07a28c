"""Consumers' use of their plans' quotas, for the admin UI's quota usage page, from
usage_daily (collected from every gateway's counters by the controller).

Each figure is what the plan-wide quota counts: models that a plan's
`model_overrides` give a quota field of their own are left out of that field (the
API's GET /consumers/<id>/usage shows them per model).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from control_plane.tables.config import Consumer, Plan
from control_plane.tables.records import UsageDaily


@dataclass(frozen=True)
class Usage:
    consumer: str
    plan: str
    requests_today: int
    daily_requests: int | None
    requests_month: int
    monthly_requests: int | None
    tokens_month: int
    monthly_tokens: int | None


def period_starts(now: datetime) -> tuple[datetime, datetime]:
    now = now.astimezone(timezone.utc)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return day, day.replace(day=1)


def _own(plan: Plan, field: str) -> set[str]:
    """Models counted apart from the plan for `field`."""
    return {m for m, o in (plan.model_overrides or {}).items()
            if isinstance(o, dict) and field in o}


def by_consumer(session: Session, now: datetime | None = None) -> list[Usage]:
    """One row per consumer on a plan, by consumer name."""
    day, month = period_starts(now or datetime.now(timezone.utc))
    today = day.date()
    stmt = (select(UsageDaily.consumer_id, UsageDaily.model,
                   func.coalesce(func.sum(UsageDaily.requests)
                                 .filter(UsageDaily.day == today), 0).label("today"),
                   func.sum(UsageDaily.requests).label("month"),
                   func.sum(UsageDaily.total_tokens).label("tokens"))
            .where(UsageDaily.day >= month.date(), UsageDaily.day <= today)
            .group_by(UsageDaily.consumer_id, UsageDaily.model))
    used: dict[int, list] = {}
    for r in session.execute(stmt):
        used.setdefault(r.consumer_id, []).append(r)
    rows = session.execute(select(Consumer.id, Consumer.name, Plan)
                           .join(Plan, Consumer.plan_id == Plan.id).order_by(Consumer.name))
    out = []
    for cid, name, plan in rows:
        mine = used.get(cid, [])

        def total(field: str, column: str) -> int:
            skip = _own(plan, field)
            return sum(int(getattr(r, column)) for r in mine if r.model not in skip)

        out.append(Usage(consumer=name, plan=plan.name,
                         requests_today=total("daily_requests", "today"),
                         daily_requests=plan.daily_requests,
                         requests_month=total("monthly_requests", "month"),
                         monthly_requests=plan.monthly_requests,
                         tokens_month=total("monthly_tokens", "tokens"),
                         monthly_tokens=plan.monthly_tokens))
    return out
