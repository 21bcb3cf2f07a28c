"""The config version: one counter every write to a snapshot resource bumps."""
from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session


def current_version(session: Session) -> int:
    return session.execute(text("SELECT version FROM config_state WHERE id = 1")).scalar_one()


def bump_version(session: Session) -> int:
    """Increment the version inside the caller's transaction and return the new value.

    The row lock this takes also serialises concurrent config writers, so versions
    are handed out in commit order.
    """
    return session.execute(text(
        "UPDATE config_state SET version = version + 1, updated_at = now() "
        "WHERE id = 1 RETURNING version")).scalar_one()
