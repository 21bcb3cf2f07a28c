"""Admin users of the web UI: creation, password checks. Passwords are stored only as
werkzeug scrypt hashes; nothing here logs or returns a password."""
from __future__ import annotations

import functools
import math
import re
from datetime import datetime, timedelta, timezone

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from werkzeug.security import check_password_hash, generate_password_hash

from control_plane.services import audit
from control_plane.services.errors import Conflict, Invalid
from control_plane.tables.config import ADMIN_ROLES, AdminUser

USERNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
MIN_PASSWORD = 12
MAX_PASSWORD = 256
HASH_METHOD = "scrypt"


@functools.cache
def _dummy_hash() -> str:
    """Checked when the username is unknown, so a wrong name costs as much as a wrong
    password. Made at the first login, not at import: every process that imports the
    API (the CLI, each gunicorn worker) would otherwise pay one scrypt hash to start."""
    return generate_password_hash("not-a-password", method=HASH_METHOD)


def check_fields(username: str, password: str | None, role: str) -> dict[str, str]:
    """Per-field problems with a new user (empty when all is well); no password (None)
    makes a service account."""
    errors = {}
    if not USERNAME_RE.match(username or ""):
        errors["username"] = ("must be 1-64 characters of letters, digits and . _ @ -, "
                              "starting with a letter or digit")
    if password is not None and not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        errors["password"] = f"must be {MIN_PASSWORD} to {MAX_PASSWORD} characters"
    if role not in ADMIN_ROLES:
        errors["role"] = "must be one of: " + ", ".join(ADMIN_ROLES)
    return errors


def create_user(session: Session, username: str, password: str | None,
                role: str) -> AdminUser:
    """A user of the admin UI, or with no password a service account (which cannot
    sign in and acts only through its API tokens)."""
    errors = check_fields(username, password, role)
    if errors:
        raise Invalid(errors)
    hashed = None if password is None else generate_password_hash(password,
                                                                   method=HASH_METHOD)
    user = AdminUser(username=username, role=role, password_hash=hashed)
    try:
        session.add(user)
        session.flush()
        audit.record(session, "create", "admin_users", user.id, None, audit.state(user))
        session.commit()
    except IntegrityError:
        session.rollback()
        raise Conflict(f"an admin user named {username!r} already exists") from None
    except BaseException:
        session.rollback()
        raise
    return user


def set_password(session: Session, username: str, password: str) -> AdminUser:
    if not MIN_PASSWORD <= len(password or "") <= MAX_PASSWORD:
        raise Invalid({"password": f"must be {MIN_PASSWORD} to {MAX_PASSWORD} characters"})
    user = find(session, username)
    if user is None:
        raise Invalid({"username": f"no admin user named {username!r}"})
    before = audit.state(user)
    user.password_hash = generate_password_hash(password, method=HASH_METHOD)
    user.failed_logins, user.locked_until = 0, None   # a new password ends a lock
    # the hash is redacted on both sides: the entry says who changed it, and when
    audit.record(session, "update", "admin_users", user.id, before,
                 {**audit.state(user), "password_changed": True})
    session.commit()
    return user


def find(session: Session, username: str) -> AdminUser | None:
    return session.scalar(select(AdminUser).where(AdminUser.username == username))


def get(session: Session, user_id: int) -> AdminUser | None:
    return session.get(AdminUser, user_id)


class Locked(Exception):
    """Too many wrong passwords in a row: the account refuses sign-ins for a while."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"locked for {retry_after} s")
        self.retry_after = retry_after


def authenticate(session: Session, username: str, password: str,
                 max_attempts: int = 5, lockout_s: float = 300.0) -> AdminUser | None:
    """The enabled user with this name and password, or None; records the login.

    `max_attempts` wrong passwords in a row lock the account for `lockout_s` seconds:
    raises Locked (even for the right password) until then. An unknown name costs the
    same hash check and locks nothing."""
    user = find(session, username) if username else None
    now = datetime.now(timezone.utc)
    if user is not None and user.locked_until is not None and user.locked_until > now:
        check_password_hash(_dummy_hash(), password or "")   # same cost as a real check
        raise Locked(max(1, math.ceil((user.locked_until - now).total_seconds())))
    stored = user.password_hash if user is not None else None
    valid = check_password_hash(stored or _dummy_hash(), password or "") and stored is not None
    if user is not None and not valid:
        user.failed_logins = (user.failed_logins or 0) + 1
        if user.failed_logins >= max_attempts:
            user.failed_logins = 0
            user.locked_until = now + timedelta(seconds=lockout_s)
            session.commit()
            raise Locked(max(1, math.ceil(lockout_s)))
        session.commit()
        return None
    if user is None or not user.enabled:
        return None
    user.last_login_at = now
    user.failed_logins, user.locked_until = 0, None
    session.commit()
    return user


def password_matches(session: Session, username: str, password: str) -> bool:
    """Whether `password` is this user's, without recording a login."""
    user = find(session, username)
    return (user is not None and user.password_hash is not None
            and check_password_hash(user.password_hash, password))


def ensure_user(session: Session, username: str, password: str, role: str) -> bool:
    """Create the user unless one of that name exists (its password is left alone).
    Returns whether it was created."""
    if find(session, username) is not None:
        return False
    try:
        create_user(session, username, password, role)
    except Conflict:  # created meanwhile by someone else: theirs stands
        return False
    return True
