"""The audit trail: every admin change — who, when, what, before and after — written
by the services layer in the transaction of the change itself, so every writer (the
REST API, the admin UI, seeding code) is audited the same way and a change that rolls
back leaves no entry. `audit_log` is append-only (a trigger refuses UPDATE, DELETE,
TRUNCATE).

Who is acting comes from a context variable that the caller sets once per request
(`acting_as`), so service signatures stay as they are; without it the actor is
"system".
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import inspect, select
from sqlalchemy.orm import Session

from control_plane.tables.records import AuditEntry

MAX_LIMIT = 1000
# never copied into the trail: a key's hash is as good as the key for a lookup table;
# backend credentials (auth_header, the mTLS pair) are write-only; password hashes
# invite offline guessing; a TOTP secret is the second factor itself
REDACTED = {"key_hash", "auth_header", "tls_client_cert", "tls_client_key",
            "password_hash", "token_hash", "code_hash", "totp_secret"}
SKIPPED = {"created_at", "updated_at"}

_actor: ContextVar[str] = ContextVar("sluice_audit_actor", default="system")
_request_id: ContextVar[str | None] = ContextVar("sluice_audit_request_id", default=None)


def set_actor(actor: str, request_id: str | None = None) -> tuple[Token, Token]:
    return _actor.set(actor), _request_id.set(request_id)


def reset_actor(tokens: tuple[Token, Token]) -> None:
    _actor.reset(tokens[0])
    _request_id.reset(tokens[1])


@contextmanager
def acting_as(actor: str, request_id: str | None = None) -> Iterator[None]:
    tokens = set_actor(actor, request_id)
    try:
        yield
    finally:
        reset_actor(tokens)


def _jsonable(v: Any) -> Any:
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    if isinstance(v, Decimal):
        return float(v)
    return v


def state(obj: Any) -> dict[str, Any]:
    """The row's columns as JSON, secrets redacted."""
    out = {}
    for attr in inspect(obj).mapper.column_attrs:
        name = attr.key
        if name in SKIPPED:
            continue
        value = getattr(obj, name)
        if name in REDACTED:
            out[name] = None if value is None else "[redacted]"
        else:
            out[name] = _jsonable(value)
    return out


def record(session: Session, action: str, resource: str, resource_id: int | None,
           before: dict | None, after: dict | None) -> None:
    """Add one entry to the session's transaction (committed with the change)."""
    session.add(AuditEntry(actor=_actor.get(), request_id=_request_id.get(), action=action,
                           resource=resource, resource_id=resource_id, before=before,
                           after=after))


@dataclass(frozen=True)
class AuditQuery:
    resource: str | None = None
    resource_id: int | None = None
    actor: str | None = None
    action: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    before_id: int | None = None
    limit: int = 100


def search(session: Session, q: AuditQuery) -> list[AuditEntry]:
    """Newest first."""
    stmt = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(min(q.limit, MAX_LIMIT))
    for column, value in ((AuditEntry.resource, q.resource),
                          (AuditEntry.resource_id, q.resource_id),
                          (AuditEntry.actor, q.actor), (AuditEntry.action, q.action)):
        if value is not None:
            stmt = stmt.where(column == value)
    if q.since is not None:
        stmt = stmt.where(AuditEntry.at >= q.since)
    if q.until is not None:
        stmt = stmt.where(AuditEntry.at < q.until)
    if q.before_id is not None:
        stmt = stmt.where(AuditEntry.id < q.before_id)
    return list(session.scalars(stmt))


def render(e: AuditEntry) -> dict[str, Any]:
    return {"id": e.id, "at": e.at.isoformat(), "actor": e.actor, "action": e.action,
            "resource": e.resource, "resource_id": e.resource_id, "before": e.before,
            "after": e.after, "request_id": e.request_id}
