"""Gateways' usage counters into usage_daily, and the fleet's usage back to each gateway.

A gateway reports cumulative counters since its nginx started, per
"<YYYYMMDD>|<consumer id>|<model>": [requests, prompt, completion, total tokens], with
the id of that start (`boot`) and its time (`started_at`). `ingest` adds what grew
since the counters stored in the gateway's cursor row and stores the new ones, in one
transaction, the cursor row locked: a controller that dies before the commit leaves
nothing half-done, one that reads the same counters twice adds nothing the second
time, and two controllers take turns. Counters of an older boot than the cursor's
(read before a restart, committed after) are ignored; a newer boot starts from zero.

`seed` is what the gateway's quota counters lack: the fleet's usage (today's requests,
this month's requests and tokens, today's audio milliseconds, speech characters and
images: the plans' daily caps; per consumer on a plan and model) minus what this boot
of this gateway has already reported, which its own counters hold.
"""
from __future__ import annotations

import logging
from datetime import date, datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from control_plane.tables.config import Consumer
from control_plane.tables.records import UsageCursor, UsageDaily

log = logging.getLogger("sluice.usage")

# the gateway's counters, in its order (lua/sluice/usage.lua); audio and image work,
# then realtime session seconds, last (a gateway of before them reports four or seven)
FIELDS = ("requests", "prompt_tokens", "completion_tokens", "total_tokens",
          "audio_ms", "input_chars", "images", "session_seconds")
N = len(FIELDS)
KEEP_DAYS = 7   # cursor entries older than this are dropped (the gateway drops them sooner)

Key = tuple[date, int, str]


class ReportError(ValueError):
    """The gateway's answer is not a usage report."""


def parse_key(key: str) -> Key | None:
    day, _, rest = key.partition("|")
    cid, _, model = rest.partition("|")
    try:
        return datetime.strptime(day, "%Y%m%d").date(), int(cid), model or None
    except ValueError:
        return None


def parse_report(body: Any) -> tuple[str, float, dict[str, list[int]]]:
    """(boot, started_at, counters) of GET /internal/usage; raises ReportError."""
    try:
        boot, started, counters = body["boot"], float(body["started_at"]), body["counters"]
        if not isinstance(boot, str) or not boot or not isinstance(counters, dict):
            raise TypeError("boot or counters")
        clean = {}
        for key, vals in counters.items():
            if parse_key(key) is None or parse_key(key)[2] is None:
                continue
            clean[key] = [max(int(v), 0) for v in vals][:N] + [0] * (N - len(vals))
        return boot, started, clean
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportError(f"not a usage report: {exc}") from None


def ingest(session: Session, gateway_id: int, boot: str, started_at: float,
           counters: dict[str, list[int]], today: date | None = None) -> dict | None:
    """Add the growth of `counters` since the last collection to usage_daily. Returns
    this boot's counters as now recorded, or None when the report was stale."""
    today = today or datetime.now(timezone.utc).date()
    with session.begin():
        session.execute(insert(UsageCursor).values(gateway_id=gateway_id, boot="",
                                                   started_at=0.0, counters={})
                        .on_conflict_do_nothing(index_elements=["gateway_id"]))
        cursor = session.execute(select(UsageCursor).where(UsageCursor.gateway_id == gateway_id)
                                 .with_for_update()).scalar_one()
        if cursor.boot == boot:
            last = dict(cursor.counters)
        elif started_at > cursor.started_at:
            last = {}
        else:
            return None
        merged = dict(last)
        rows = []
        for key, vals in counters.items():
            prev = list(last.get(key) or [])
            prev += [0] * (N - len(prev))   # a cursor written before a field was added
            # max: a slower reader's older figures never take back what was added
            delta = [max(v - p, 0) for v, p in zip(vals, prev)]
            merged[key] = [max(v, p) for v, p in zip(vals, prev)]
            if any(delta):
                day, cid, model = parse_key(key)
                rows.append({"consumer_id": cid, "model": model, "day": day,
                             **dict(zip(FIELDS, delta))})
        if rows:
            rows.sort(key=lambda r: (r["consumer_id"], r["model"], r["day"]))  # lock order
            stmt = insert(UsageDaily).values(rows)
            session.execute(stmt.on_conflict_do_update(
                index_elements=["consumer_id", "model", "day"],
                set_={f: getattr(UsageDaily, f) + getattr(stmt.excluded, f) for f in FIELDS}))
        oldest = today - timedelta(days=KEEP_DAYS)
        merged = {k: v for k, v in merged.items() if parse_key(k)[0] >= oldest}
        if cursor.boot == boot and merged == cursor.counters:
            return merged     # nothing new: no write (this runs every second)
        cursor.boot, cursor.started_at, cursor.counters = boot, started_at, merged
        cursor.updated_at = func.now()
    return merged


# what the push carries of today's rows beside the requests (the gateway's media caps)
TODAY_FIELDS = ("audio_ms", "input_chars", "images")


def fleet(session: Session, today: date) -> dict[tuple[int, str], list[int]]:
    """Per (consumer on a plan, model): [requests today, requests this month, tokens
    this month, audio ms today, speech characters today, images today], over every
    gateway."""
    month_start = today.replace(day=1)

    def on_today(column):
        return func.coalesce(func.sum(column).filter(UsageDaily.day == today), 0)

    stmt = (select(UsageDaily.consumer_id, UsageDaily.model, on_today(UsageDaily.requests),
                   func.sum(UsageDaily.requests), func.sum(UsageDaily.total_tokens),
                   *(on_today(getattr(UsageDaily, f)) for f in TODAY_FIELDS))
            .join(Consumer, Consumer.id == UsageDaily.consumer_id)
            .where(Consumer.plan_id.is_not(None), UsageDaily.day >= month_start,
                   UsageDaily.day <= today)
            .group_by(UsageDaily.consumer_id, UsageDaily.model))
    return {(row[0], row[1]): [int(v) for v in row[2:]] for row in session.execute(stmt)}


def seed(fleet_usage: dict[tuple[int, str], list[int]], own: dict[str, list[int]],
         today: date) -> dict[str, dict[str, list[int]]]:
    """The push body's `usage`: the fleet's figures minus this boot's own reports."""
    width = 3 + len(TODAY_FIELDS)
    left = {k: list(v) + [0] * (width - len(v)) for k, v in fleet_usage.items()}
    for key, vals in own.items():
        day, cid, model = parse_key(key)
        got = left.get((cid, model))
        if got is None or (day.year, day.month) != (today.year, today.month):
            continue
        vals = list(vals) + [0] * (N - len(vals))
        if day == today:
            got[0] -= vals[0]
            for i, f in enumerate(TODAY_FIELDS, start=3):
                got[i] -= vals[FIELDS.index(f)]
        got[1] -= vals[0]
        got[2] -= vals[3]
    out: dict[str, dict[str, list[int]]] = {}
    for (cid, model), vals in sorted(left.items()):
        vals = [max(v, 0) for v in vals]
        if any(vals):
            out.setdefault(str(cid), {})[model] = vals
    return out
