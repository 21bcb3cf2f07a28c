"""Which of the running controllers is active: the one holding a PostgreSQL session
advisory lock (services/controllers.LOCK) on a connection of its own, kept for as
long as it leads.

    standby ── pg_try_advisory_lock ──> active ── its session ends (crash, kill -9,
       ▲         every ~1 s                │       network) ──> lock free
       └────────── lost the connection ◄───┘

A dead leader's session ends with its TCP connection, which releases the lock; a
standby's next try (STANDBY_RETRY) takes it. While active, each check asks Postgres
whether this session still holds the lock, so a leader whose connection broke stops
working at its next tick instead of competing with its successor. TCP keepalives and
a connect timeout bound how long a silent network can hide a broken connection.

The lock connection's application_name is the controller's id, so pg_stat_activity
(and GET /api/v1/controllers) can tell which process holds the lock.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
from datetime import datetime, timezone

from sqlalchemy import Connection, text
from sqlalchemy.pool import NullPool

from control_plane.db import make_engine
from control_plane.services.controllers import LOCK

log = logging.getLogger("sluice.controller.leader")

STANDBY_RETRY = 1.0   # seconds between a standby's tries
_CONNECT_ARGS = {"connect_timeout": 5, "keepalives": 1, "keepalives_idle": 5,
                 "keepalives_interval": 2, "keepalives_count": 2}


def controller_id() -> str:
    """host:pid:random, short enough for application_name (63 bytes)."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(3)}"


class Leadership:
    def __init__(self, database_url: str, ident: str | None = None):
        self.id = ident or controller_id()
        self._engine = make_engine(
            database_url, poolclass=NullPool, pool_pre_ping=False,
            isolation_level="AUTOCOMMIT",
            connect_args={**_CONNECT_ARGS, "application_name": self.id})
        self._conn: Connection | None = None
        self.active_since: datetime | None = None

    @property
    def active(self) -> bool:
        return self._conn is not None

    def check(self) -> bool:
        """Keep the lock, or try to take it; whether this process is active now."""
        if self._conn is not None:
            try:
                held = self._conn.execute(text(
                    "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() "
                    "AND locktype = 'advisory' AND classid = :k1 AND objid = :k2 "
                    "AND objsubid = 2 AND granted"), {"k1": LOCK[0], "k2": LOCK[1]}).scalar()
            except Exception as exc:  # noqa: BLE001 - any failure: we may not lead
                log.error("lost the database connection that holds the leader lock: %s",
                          type(exc).__name__)
                held = 0
            if held:
                return True
            self._drop()
            log.warning("controller %s is no longer active", self.id)
            return False
        try:
            conn = self._engine.connect()
        except Exception as exc:  # noqa: BLE001 - the database is down: stay standby
            log.debug("cannot reach the database for the leader lock: %s", exc)
            return False
        try:
            got = conn.execute(text("SELECT pg_try_advisory_lock(:k1, :k2)"),
                               {"k1": LOCK[0], "k2": LOCK[1]}).scalar()
        except Exception:  # noqa: BLE001
            conn.close()
            return False
        if not got:
            conn.close()
            return False
        self._conn = conn
        self.active_since = datetime.now(timezone.utc)
        log.info("controller %s is active (holds the leader lock)", self.id)
        return True

    def _drop(self) -> None:
        conn, self._conn, self.active_since = self._conn, None, None
        if conn is not None:
            try:
                conn.close()   # ends the session: the lock, if still ours, goes with it
            except Exception:  # noqa: BLE001 - already broken
                pass

    def release(self) -> None:
        """Step down (a clean stop): a standby takes over at its next try."""
        if self._conn is not None:
            log.info("controller %s steps down", self.id)
        self._drop()
        self._engine.dispose()
