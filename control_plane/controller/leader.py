"""Which of the running controllers is active: the one holding a PostgreSQL session
advisory lock (services/controllers.LOCK) on a connection of its own, kept for as
long as it leads.

    standby ── pg_try_advisory_lock, every STANDBY_RETRY ──> active
       ▲                                                       │
       └── its session ended: crash, kill -9, network, fenced ─┘

A thread of its own, apart from the controller's ticks (a slow tick delays nothing
here), every second:

- active: checks that its session still holds the lock and renews its lease (its row
  in `controllers`, on the same connection); a failure of either ends its term;
- standby: tries to take the lock; when the holder's lease is older than LEASE (a
  frozen or cut-off process whose session Postgres still keeps), ends the holder's
  session with pg_terminate_backend, and takes the lock at the next try.

A dead leader's session ends with its TCP connection; a silent network is bounded by
TCP keepalives on both sides (the client's connect_args, the server's per-session
tcp_keepalives_* and tcp_user_timeout). The lock connection's application_name is the
controller's id, so pg_stat_activity (and GET /api/v1/controllers) tell who holds it.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from datetime import datetime, timezone

from sqlalchemy import Connection, text
from sqlalchemy.pool import NullPool

from control_plane.controller import cp_metrics
from control_plane.db import make_engine
from control_plane.services import controllers
from control_plane.services.controllers import LOCK

log = logging.getLogger("sluice.controller.leader")

STANDBY_RETRY = 1.0   # seconds between checks (a standby's tries, a leader's renewals)
LEASE = 10.0          # a holder that renewed nothing for this long is fenced
_CONNECT_ARGS = {"connect_timeout": 5, "keepalives": 1, "keepalives_idle": 5,
                 "keepalives_interval": 2, "keepalives_count": 2}
# the server side: a session whose client vanished ends within ~10 s, freeing the lock
_SESSION = ("SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; "
            "SET tcp_keepalives_count = 2; SET tcp_user_timeout = 10000")


def controller_id() -> str:
    """host:pid:random, short enough for application_name (63 bytes)."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(3)}"


class Leadership:
    def __init__(self, database_url: str, ident: str | None = None,
                 interval: float = STANDBY_RETRY, lease: float = LEASE):
        self.id = ident or controller_id()
        self.interval = interval
        self.lease = lease
        self.started_at = datetime.now(timezone.utc)
        self.active_since: datetime | None = None
        self._engine = make_engine(
            database_url, poolclass=NullPool, pool_pre_ping=False,
            isolation_level="AUTOCOMMIT",
            connect_args={**_CONNECT_ARGS, "application_name": self.id})
        self._conn: Connection | None = None
        self._active = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self._active.is_set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sluice-leader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Step down (a clean stop): a standby takes over at its next try."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self._conn is not None:
            log.info("controller %s steps down", self.id)
        self._drop()
        self._engine.dispose()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.check()
            except Exception:  # noqa: BLE001 - never let the thread die; next round
                log.exception("leader check failed")
            self._stop.wait(self.interval)

    def check(self) -> bool:
        """One round: keep or take the lock, renew the lease; whether active now."""
        if self._conn is not None:
            if self._renew():
                return True
            self._drop()
            log.warning("controller %s is no longer active", self.id)
            return False
        conn = self._connect()
        if conn is None:
            return False
        try:
            got = conn.execute(text("SELECT pg_try_advisory_lock(:k1, :k2)"),
                               {"k1": LOCK[0], "k2": LOCK[1]}).scalar()
            if not got:
                self._fence(conn)
                controllers.report(conn, self.id, socket.gethostname(), os.getpid(),
                                   self.started_at, None)
                conn.close()
                return False
        except Exception as exc:  # noqa: BLE001 - the database went away meanwhile
            log.debug("leader lock try failed: %s", exc)
            conn.close()
            return False
        self._conn = conn
        self.active_since = datetime.now(timezone.utc)
        if not self._renew():
            self._drop()
            return False
        log.info("controller %s is active (holds the leader lock)", self.id)
        self._active.set()
        cp_metrics.CONTROLLER_ACTIVE.set(1)
        return True

    def _connect(self) -> Connection | None:
        try:
            conn = self._engine.connect()
        except Exception as exc:  # noqa: BLE001 - the database is down: stay standby
            log.debug("cannot reach the database for the leader lock: %s", exc)
            return None
        try:
            for statement in _SESSION.split("; "):
                conn.execute(text(statement))
        except Exception as exc:  # noqa: BLE001 - e.g. tcp_user_timeout before PG 12
            log.debug("session keepalive settings refused: %s", exc)
        return conn

    def _renew(self) -> bool:
        """Whether our session still holds the lock; if so, renew our lease."""
        try:
            held = self._conn.execute(text(
                "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() "
                "AND locktype = 'advisory' AND classid = :k1 AND objid = :k2 "
                "AND objsubid = 2 AND granted"), {"k1": LOCK[0], "k2": LOCK[1]}).scalar()
            if held:
                controllers.report(self._conn, self.id, socket.gethostname(), os.getpid(),
                                   self.started_at, self.active_since)
            return bool(held)
        except Exception as exc:  # noqa: BLE001 - any failure: we may not lead
            log.error("lost the database connection that holds the leader lock: %s",
                      type(exc).__name__)
            return False

    def _fence(self, conn: Connection) -> None:
        """End the session of a holder whose lease expired (frozen, or cut off while
        Postgres still keeps its session), so the lock is free at the next try."""
        found = controllers.expired_holder(conn, self.lease)
        if found is None:
            return
        pid, holder = found
        ended = conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
        log.warning("controller %s renewed nothing for %.0f s: %s its session", holder,
                    self.lease, "ended" if ended else "could not end")

    def _drop(self) -> None:
        self._active.clear()
        cp_metrics.CONTROLLER_ACTIVE.set(0)
        conn, self._conn, self.active_since = self._conn, None, None
        if conn is not None:
            try:
                conn.close()   # ends the session: the lock, if still ours, goes with it
            except Exception:  # noqa: BLE001 - already broken
                pass
