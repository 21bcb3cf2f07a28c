"""The controller processes and the election between them.

Any number of `sluice controller`s may run against one database; the one holding the
PostgreSQL session advisory lock LOCK is active (control_plane/controller/
leader.py). A holder that dies loses its session and so the lock; a standby takes it
within a second or two. Each process also upserts its row in `controllers` every
second: for the API and the UI, and as the holder's lease (a holder whose row is older
than the lease is frozen or cut off, and a standby ends its session). Whether a row is
active is read from pg_locks, the truth, never from the row alone.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from control_plane.tables.records import ControllerRecord

# pg_try_advisory_lock(int4, int4): "the active Sluice controller" per database. The
# two-key form (objsubid 2 in pg_locks) never meets the one-key locks the log shipper
# takes per source, whatever their numbers.
LOCK = (1_397_511_253, 1)   # "SLUU", 1
SEEN_WITHIN = timedelta(seconds=60)   # rows older than this are not listed

_HOLDER = ("FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
           "WHERE l.locktype = 'advisory' AND l.classid = :k1 AND l.objid = :k2 "
           "AND l.objsubid = 2 AND l.granted "
           "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())")


def holder_name(session: Session) -> str | None:
    """The application_name of the session that holds the lock (a controller id)."""
    return session.scalar(text("SELECT a.application_name " + _HOLDER),
                          {"k1": LOCK[0], "k2": LOCK[1]})


def report(conn: Connection, controller_id: str, host: str, pid: int, started_at: datetime,
           active_since: datetime | None) -> None:
    """Upsert this controller's row (last_seen_at = the database's now). On an
    autocommit connection (the leader's): no transaction of its own."""
    values = {"host": host[:255], "pid": pid, "started_at": started_at,
              "last_seen_at": func.now(), "active_since": active_since}
    conn.execute(insert(ControllerRecord).values(id=controller_id, **values)
                 .on_conflict_do_update(index_elements=["id"], set_=values))


def expired_holder(conn: Connection, lease: float) -> tuple[int, str] | None:
    """(backend pid, controller id) of a lock holder whose row was not renewed within
    `lease` seconds, or None (no holder, a live one, or one without a row)."""
    row = conn.execute(text(
        "SELECT a.pid, a.application_name " + _HOLDER + " AND EXISTS (SELECT 1 FROM "
        "controllers c WHERE c.id = a.application_name "
        "AND c.last_seen_at < now() - make_interval(secs => :lease))"),
        {"k1": LOCK[0], "k2": LOCK[1], "lease": lease}).first()
    return (row[0], row[1]) if row else None


def listing(session: Session) -> dict[str, Any]:
    """Controllers seen lately, the active one first, and which one is active."""
    active = holder_name(session)
    rows = session.scalars(select(ControllerRecord).where(
        ControllerRecord.last_seen_at >= func.now() - SEEN_WITHIN)
        .order_by(ControllerRecord.started_at))
    items = []
    for r in rows:
        is_active = r.id == active
        items.append({"id": r.id, "host": r.host, "pid": r.pid, "active": is_active,
                      "started_at": r.started_at, "last_seen_at": r.last_seen_at,
                      "active_since": r.active_since if is_active else None})
    items.sort(key=lambda c: not c["active"])
    return {"active": active, "items": items}
