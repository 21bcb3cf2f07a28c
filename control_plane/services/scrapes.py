"""Prometheus scrapes of backends' model servers (control_plane/controller/scraper.py takes them):
the latest per backend, a short history, and their free-capacity figure for the
weight formula.

Like agent telemetry, a scrape is stale when its last success is older than
`stale_after` seconds; a stale or failing scrape is shown as such and leaves the
backend's free-memory term to agent telemetry (or to the pool's mean), never to 0.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from control_plane.tables.config import Backend
from control_plane.tables.records import BackendScrape, BackendScrapeSample

HISTORY_SECONDS = 600


@dataclass(frozen=True)
class Outcome:
    """One scrape: a figure and its inputs, or an error."""
    backend_id: int
    format: str
    at: datetime
    free_fraction: float | None = None
    values: dict[str, float] | None = None
    error: str | None = None


def store(session: Session, outcomes: Iterable[Outcome]) -> None:
    """Upsert the latest scrape of each backend, append successes to the history."""
    outcomes = list(outcomes)
    if not outcomes:
        return
    try:
        ids = [o.backend_id for o in outcomes]
        live = set(session.scalars(select(Backend.id).where(Backend.id.in_(ids))))
        rows = {r.backend_id: r for r in session.scalars(
            select(BackendScrape).where(BackendScrape.backend_id.in_(ids)))}
        for o in outcomes:
            if o.backend_id not in live:      # deleted while it was being scraped
                continue
            row = rows.get(o.backend_id)
            if row is None:
                row = BackendScrape(backend_id=o.backend_id, values={})
                session.add(row)
            row.format, row.attempted_at, row.error = o.format, o.at, o.error
            if o.error is None:
                row.free_fraction, row.values, row.scraped_at = (
                    o.free_fraction, o.values or {}, o.at)
                session.add(BackendScrapeSample(backend_id=o.backend_id, at=o.at,
                                                free_fraction=o.free_fraction,
                                                values=o.values or {}))
        oldest = min(o.at for o in outcomes) - timedelta(seconds=HISTORY_SECONDS)
        session.execute(delete(BackendScrapeSample).where(BackendScrapeSample.at < oldest))
        session.commit()
    except BaseException:
        session.rollback()
        raise


def _fresh(row: BackendScrape, now: datetime, stale_after: float) -> bool:
    return (row.scraped_at is not None
            and (now - row.scraped_at).total_seconds() <= stale_after)


def fresh_free(session: Session, stale_after: float,
               now: datetime | None = None) -> dict[str, float]:
    """Free-capacity fraction per backend name, from fresh scrapes of backends that
    are still configured for scraping."""
    now = now or datetime.now(timezone.utc)
    rows = session.execute(
        select(Backend.name, BackendScrape).join(BackendScrape)
        .where(Backend.metrics_url.is_not(None)))
    return {name: row.free_fraction for name, row in rows
            if row.free_fraction is not None and _fresh(row, now, stale_after)}


def latest(session: Session, stale_after: float) -> list[dict[str, Any]]:
    """Every backend configured for scraping with its latest scrape (or none yet)."""
    now = datetime.now(timezone.utc)
    out = []
    for b, row in session.execute(
            select(Backend, BackendScrape).outerjoin(BackendScrape)
            .where(Backend.metrics_url.is_not(None)).order_by(Backend.id)):
        entry: dict[str, Any] = {"backend_id": b.id, "backend": b.name,
                                 "metrics_url": b.metrics_url,
                                 "metrics_format": b.metrics_format,
                                 "free_fraction": None, "values": {}, "scraped_at": None,
                                 "age_s": None, "stale": True, "error": None}
        if row is not None:
            age = ((now - row.scraped_at).total_seconds()
                   if row.scraped_at is not None else None)
            entry.update(free_fraction=row.free_fraction, values=row.values,
                         scraped_at=_iso(row.scraped_at),
                         age_s=None if age is None else round(age, 3),
                         stale=not _fresh(row, now, stale_after), error=row.error,
                         attempted_at=_iso(row.attempted_at))
        out.append(entry)
    return out


def history(session: Session, backend_id: int, seconds: float) -> list[dict[str, Any]]:
    since = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    return [{"at": _iso(s.at), "free_fraction": s.free_fraction, "values": s.values}
            for s in session.scalars(
                select(BackendScrapeSample)
                .where(BackendScrapeSample.backend_id == backend_id,
                       BackendScrapeSample.at >= since)
                .order_by(BackendScrapeSample.at))]


def _iso(dt: datetime | None) -> str | None:
    return None if dt is None else dt.astimezone(timezone.utc).isoformat()
