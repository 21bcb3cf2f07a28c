"""Personal API tokens of admin users and service accounts.

A token is `sluice_` and 32 random bytes (URL-safe base64): with that much entropy a
plain SHA-256 is as good as a slow hash, and lets the lookup be one indexed query. The
plain token is returned once, by `create`; the table keeps its hash and a prefix.

A token acts with its user's role, narrowed by its scopes: none means the whole role;
`read` allows every read; a resource kind (a path segment of the API, `models`,
`backends`…) allows everything on that kind. Which scope a request needs is the API's
business (api/identity.py); this module only stores, finds and revokes.
"""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.services import audit
from control_plane.services.errors import Invalid, NotFound
from control_plane.tables.config import AdminUser
from control_plane.tables.identity import AdminToken

PREFIX = "sluice_"
READ = "read"
# Last use is written at most this often per token: not one UPDATE per API call.
LAST_USE_EVERY = timedelta(seconds=60)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def actor(token: AdminToken) -> str:
    """How the audit trail names a change made with this token: user and token."""
    return f"token:{token.user.username}/{token.name}#{token.id}"


def create(session: Session, user: AdminUser, name: str, scopes: list[str],
           expires_at: datetime | None) -> tuple[AdminToken, str]:
    """A new token of `user`; returns the row and the plain token (shown once)."""
    if not user.enabled:
        raise Invalid({"user": f"admin user {user.username!r} is disabled"})
    if expires_at is not None and expires_at <= datetime.now(timezone.utc):
        raise Invalid({"expires_at": "must be in the future"})
    plain = PREFIX + secrets.token_urlsafe(32)
    row = AdminToken(user_id=user.id, user=user, name=name, token_hash=hash_token(plain),
                     prefix=plain[:len(PREFIX) + 4], scopes=list(scopes),
                     expires_at=expires_at)
    try:
        session.add(row)
        session.flush()
        audit.record(session, "create", "admin_tokens", row.id, None, audit.state(row))
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return row, plain


def listing(session: Session, user: AdminUser | None) -> list[AdminToken]:
    """`user`'s tokens (every user's with None), newest first."""
    stmt = select(AdminToken).order_by(AdminToken.id.desc())
    if user is not None:
        stmt = stmt.where(AdminToken.user_id == user.id)
    return list(session.scalars(stmt))


def revoke(session: Session, token_id: int, user: AdminUser | None) -> AdminToken:
    """Revoke one of `user`'s tokens (anyone's with None). Revoking twice is a no-op."""
    row = session.get(AdminToken, token_id)
    if row is None or (user is not None and row.user_id != user.id):
        raise NotFound(f"no token with id {token_id}")
    if row.revoked_at is None:
        before = audit.state(row)
        row.revoked_at = datetime.now(timezone.utc)
        audit.record(session, "update", "admin_tokens", row.id, before, audit.state(row))
        session.commit()
    return row


@dataclass(frozen=True)
class Refused(Exception):
    """A token that exists but may not be used: expired, revoked, user disabled."""
    reason: str


def authenticate(session: Session, plain: str) -> AdminToken | None:
    """The token row for `plain`, None when unknown; raises Refused when it is known
    but expired, revoked or its user disabled. Records the use."""
    if not plain.startswith(PREFIX):
        return None
    row = session.scalar(select(AdminToken).where(AdminToken.token_hash == hash_token(plain)))
    if row is None:
        return None
    now = datetime.now(timezone.utc)
    if row.revoked_at is not None:
        raise Refused(f"token {row.name!r} was revoked at {row.revoked_at.isoformat()}")
    if row.expires_at is not None and row.expires_at <= now:
        raise Refused(f"token {row.name!r} expired at {row.expires_at.isoformat()}")
    if not row.user.enabled:
        raise Refused(f"the user of token {row.name!r} ({row.user.username}) is disabled")
    if row.last_used_at is None or now - row.last_used_at >= LAST_USE_EVERY:
        row.last_used_at = now
        session.commit()
    return row
