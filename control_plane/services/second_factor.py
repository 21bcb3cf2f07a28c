"""The TOTP second factor (RFC 6238: six digits, 30-second steps, SHA-1, as every
authenticator app speaks it) of admin users, and its single-use recovery codes.

Enrolment has two steps: `begin` draws a secret (shown once, to put in an app), and
`confirm` puts it in force once the first code from the app matches, returning ten
recovery codes (shown once; stored as SHA-256). `verify` accepts a current code (one
step either side, for clock drift), never the same step twice, or an unused
recovery code, which it uses up.
"""
from __future__ import annotations

import hashlib
import secrets
import time
from datetime import datetime, timezone

import pyotp
from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.services import audit
from control_plane.services.errors import Conflict, Invalid
from control_plane.tables.config import AdminUser
from control_plane.tables.identity import RecoveryCode

ISSUER = "Sluice"
RECOVERY_CODES = 10
STEP_S = 30
DRIFT_STEPS = 1


def enrolled(user: AdminUser) -> bool:
    return user.totp_secret is not None and user.totp_confirmed_at is not None


def _hash(code: str) -> str:
    return hashlib.sha256(code.strip().lower().replace("-", "").encode()).hexdigest()


def begin(session: Session, user: AdminUser) -> tuple[str, str]:
    """A new secret for `user`, not yet in force: (secret, otpauth:// URI)."""
    if enrolled(user):
        raise Conflict(f"{user.username} already has a second factor: remove it first")
    user.totp_secret = pyotp.random_base32()
    user.totp_confirmed_at = user.totp_last_step = None
    session.commit()
    uri = pyotp.TOTP(user.totp_secret).provisioning_uri(name=user.username, issuer_name=ISSUER)
    return user.totp_secret, uri


def _matching_step(secret: str, code: str, now: float) -> int | None:
    totp = pyotp.TOTP(secret)
    step = int(now // STEP_S)
    for s in range(step - DRIFT_STEPS, step + DRIFT_STEPS + 1):
        if secrets.compare_digest(totp.at(s * STEP_S), code.strip()):
            return s
    return None


def confirm(session: Session, user: AdminUser, code: str) -> list[str]:
    """Put the begun secret in force with its first code; the recovery codes, once."""
    if user.totp_secret is None or enrolled(user):
        raise Conflict("no enrolment under way: begin one first")
    step = _matching_step(user.totp_secret, code or "", time.time())
    if step is None:
        raise Invalid({"code": "does not match: type the code your app shows now"})
    before = audit.state(user)
    user.totp_confirmed_at = datetime.now(timezone.utc)
    user.totp_last_step = step
    plain = [secrets.token_hex(5) for _ in range(RECOVERY_CODES)]
    session.add_all(RecoveryCode(user_id=user.id, code_hash=_hash(c)) for c in plain)
    audit.record(session, "update", "admin_users", user.id, before,
                 {**audit.state(user), "second_factor": "enrolled"})
    session.commit()
    return [f"{c[:5]}-{c[5:]}" for c in plain]


def remove(session: Session, user: AdminUser) -> None:
    before = audit.state(user)
    user.totp_secret = user.totp_confirmed_at = user.totp_last_step = None
    for code in session.scalars(select(RecoveryCode).where(RecoveryCode.user_id == user.id)):
        session.delete(code)
    audit.record(session, "update", "admin_users", user.id, before,
                 {**audit.state(user), "second_factor": "removed"})
    session.commit()


def verify(session: Session, user: AdminUser, code: str) -> str | None:
    """How `code` proved the second factor ("totp" or "recovery code"), None when it
    does not; a TOTP step or a recovery code counts once."""
    if not enrolled(user) or not code:
        return None
    step = _matching_step(user.totp_secret or "", code, time.time())
    if step is not None and step > (user.totp_last_step or -1):
        user.totp_last_step = step
        session.commit()
        return "totp"
    row = session.scalar(select(RecoveryCode).where(
        RecoveryCode.user_id == user.id, RecoveryCode.code_hash == _hash(code),
        RecoveryCode.used_at.is_(None)).with_for_update())
    if row is None:
        return None
    row.used_at = datetime.now(timezone.utc)
    audit.record(session, "update", "admin_users", user.id, None,
                 {"second_factor": "recovery code used", "recovery_code_id": row.id})
    session.commit()
    return "recovery code"


def recovery_codes_left(session: Session, user: AdminUser) -> int:
    return len(session.scalars(select(RecoveryCode.id).where(
        RecoveryCode.user_id == user.id, RecoveryCode.used_at.is_(None))).all())
