"""Consumers' use of their plans' quotas, counted from the shipped inference log.

The gateways enforce quotas from their own shared-dict counters; this is the fleet's
view of the same periods (UTC day and month), as far as the log has been shipped.
Requests count when the gateway answered them without refusing them for a limit
(429), which is what the quota counters count too.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from control_plane.models import Consumer, InferenceLog, Plan


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


def by_consumer(session: Session, now: datetime | None = None) -> list[Usage]:
    """One row per consumer on a plan, by consumer name."""
    day, month = period_starts(now or datetime.now(timezone.utc))
    counted = InferenceLog.status != 429
    tokens = func.coalesce(InferenceLog.prompt_tokens, 0) + \
        func.coalesce(InferenceLog.completion_tokens, 0)
    stmt = (select(InferenceLog.consumer,
                   func.count().filter(InferenceLog.ts >= day, counted).label("today"),
                   func.count().filter(counted).label("month"),
                   func.coalesce(func.sum(tokens), 0).label("tokens"))
            .where(InferenceLog.ts >= month, InferenceLog.consumer.is_not(None))
            .group_by(InferenceLog.consumer))
    used = {r.consumer: r for r in session.execute(stmt)}
    rows = session.execute(select(Consumer.name, Plan).join(Plan, Consumer.plan_id == Plan.id)
                           .order_by(Consumer.name))
    out = []
    for name, plan in rows:
        u = used.get(name)
        out.append(Usage(consumer=name, plan=plan.name,
                         requests_today=u.today if u else 0,
                         daily_requests=plan.daily_requests,
                         requests_month=u.month if u else 0,
                         monthly_requests=plan.monthly_requests,
                         tokens_month=int(u.tokens) if u else 0,
                         monthly_tokens=plan.monthly_tokens))
    return out
