"""Reading and pruning `inference_logs`: search, per-model aggregates, retention."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Engine, delete, func, select, text
from sqlalchemy.orm import Session

from control_plane.services import log_chain
from control_plane.tables.records import InferenceLog

MAX_LIMIT = 1000
RETENTION_BATCH = 10_000


@dataclass(frozen=True)
class LogQuery:
    request_id: str | None = None
    consumer: str | None = None
    model: str | None = None
    status: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    before_id: int | None = None     # keyset paging: rows with a smaller id
    limit: int = 100


def search(session: Session, q: LogQuery) -> list[InferenceLog]:
    """Newest first."""
    stmt = select(InferenceLog).order_by(InferenceLog.id.desc()).limit(min(q.limit, MAX_LIMIT))
    if q.request_id is not None:
        stmt = stmt.where(InferenceLog.request_id == q.request_id)
    if q.consumer is not None:
        stmt = stmt.where(InferenceLog.consumer == q.consumer)
    if q.model is not None:
        stmt = stmt.where(InferenceLog.model_name == q.model)
    if q.status is not None:
        stmt = stmt.where(InferenceLog.status == q.status)
    if q.since is not None:
        stmt = stmt.where(InferenceLog.ts >= q.since)
    if q.until is not None:
        stmt = stmt.where(InferenceLog.ts < q.until)
    if q.before_id is not None:
        stmt = stmt.where(InferenceLog.id < q.before_id)
    return list(session.scalars(stmt))


def render(row: InferenceLog) -> dict[str, Any]:
    return {
        "id": row.id, "ts": row.ts.isoformat(), "gateway": row.gateway,
        "request_id": row.request_id, "consumer": row.consumer, "plan": row.plan,
        "model": row.model_name, "backend": row.backend, "method": row.method,
        "path": row.path, "status": row.status, "latency_ms": row.latency,
        "upstream_latency_ms": row.upstream_latency, "prompt_tokens": row.prompt_tokens,
        "completion_tokens": row.completion_tokens, "cache_status": row.cache_status,
        "error_type": row.error_type, "bytes_sent": row.bytes_sent,
        "queue_ms": row.queue_wait,
    }


def stats(session: Session, since: datetime, until: datetime) -> list[dict[str, Any]]:
    """Per model over [since, until): requests, requests/s, error rates, latency
    percentiles (ms). Errors are 5xx (the gateway or a backend failed); 4xx are the
    callers' and counted apart."""
    seconds = max((until - since).total_seconds(), 1e-9)
    lat = InferenceLog.latency
    stmt = (select(InferenceLog.model_name,
                   func.count().label("requests"),
                   func.count().filter(InferenceLog.status >= 500).label("errors"),
                   func.count().filter(InferenceLog.status.between(400, 499)).label("refused"),
                   func.percentile_cont(0.5).within_group(lat).label("p50"),
                   func.percentile_cont(0.95).within_group(lat).label("p95"),
                   func.percentile_cont(0.99).within_group(lat).label("p99"))
            .where(InferenceLog.ts >= since, InferenceLog.ts < until)
            .group_by(InferenceLog.model_name)
            .order_by(func.count().desc(), InferenceLog.model_name))
    out = []
    for r in session.execute(stmt):
        out.append({
            "model": r.model_name, "requests": r.requests,
            "requests_per_second": round(r.requests / seconds, 4),
            "error_rate": round(r.errors / r.requests, 4),
            "client_error_rate": round(r.refused / r.requests, 4),
            "latency_ms": {"p50": _ms(r.p50), "p95": _ms(r.p95), "p99": _ms(r.p99)},
        })
    return out


def _ms(v: float | None) -> float | None:
    return None if v is None else round(float(v), 2)


def delete_older_than(engine: Engine, cutoff: datetime,
                      batch: int = RETENTION_BATCH) -> int:
    """Remove old rows in batches of `batch`, one short transaction each (no long
    lock, no huge WAL burst). Returns the rows removed.

    A chained row goes only from the old end of its chain: each chain loses its rows
    up to the last one before the first row with ts >= cutoff (a late line keeps the
    older lines around it a little longer), and a retention anchor records the last
    row removed, so the rest still verifies (services/log_chain.py). Rows shipped
    before the chain began go by age alone."""
    removed = _delete_batches(engine, (InferenceLog.chain_seq.is_(None),
                                       InferenceLog.ts < cutoff), batch)
    with engine.connect() as conn:
        names = [n for n in log_chain.chains(conn) if n.startswith(log_chain.INFERENCE)]
    for name in names:
        gateway = name[len(log_chain.INFERENCE):]
        mine = (InferenceLog.gateway == gateway, InferenceLog.chain_seq.is_not(None))
        with engine.begin() as conn:
            last = _old_end(conn, mine, cutoff)
            if last is None:
                continue
            anchored = conn.execute(text(
                "SELECT 1 FROM log_anchors WHERE chain = :c AND seq = :s AND "
                "kind = 'retention'"), {"c": name, "s": last.chain_seq}).first()
            if anchored is None:
                log_chain.add_anchor(conn, name, last.chain_seq, last.id,
                                     bytes(last.row_hash), "retention")
        removed += _delete_batches(engine, (*mine, InferenceLog.id <= last.id), batch)
    return removed


def _old_end(conn, mine: tuple, cutoff: datetime):
    """The last row of a chain to remove (id, chain_seq, row_hash): the one before its
    first row with ts >= cutoff; None: none. Within a chain id order is chain order
    (one shipper at a time appends, in order), so the primary key finds it without an
    index of its own."""
    keep = conn.execute(select(InferenceLog.id).where(*mine, InferenceLog.ts >= cutoff)
                        .order_by(InferenceLog.id).limit(1)).scalar()
    q = select(InferenceLog.id, InferenceLog.chain_seq, InferenceLog.row_hash).where(*mine)
    if keep is not None:
        q = q.where(InferenceLog.id < keep)
    return conn.execute(q.order_by(InferenceLog.id.desc()).limit(1)).one_or_none()


def _delete_batches(engine: Engine, where: tuple, batch: int) -> int:
    removed = 0
    while True:
        with engine.begin() as conn:
            ids = select(InferenceLog.id).where(*where).limit(batch).scalar_subquery()
            n = conn.execute(delete(InferenceLog).where(InferenceLog.id.in_(ids))).rowcount
        removed += n
        if n < batch:
            return removed


def retention_cutoff(days: float, now: datetime | None = None) -> datetime:
    return (now or datetime.now(timezone.utc)) - timedelta(days=days)


def brief_query(session: Session) -> list[tuple[str, int]]:
    """The product brief's query, verbatim: models with the most requests over 1 s."""
    return [tuple(r) for r in session.execute(text(
        "SELECT model_name, COUNT(*) FROM inference_logs WHERE latency > 1000 "
        "GROUP BY model_name ORDER BY COUNT(*) DESC LIMIT 5;"))]
