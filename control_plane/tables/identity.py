"""Tables of admin identities beyond the users themselves (tables/config.py's
AdminUser): personal API tokens and second-factor recovery codes. Both hold only
SHA-256 hashes of high-entropy secrets. Changed only through Alembic."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Integer, String, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column, relationship

from control_plane.tables.base import Base
from control_plane.tables.config import AdminUser


class AdminToken(Base):
    """A personal API token of an admin user or service account: it acts with its
    user's role, narrowed by `scopes` (empty: the whole role)."""
    __tablename__ = "admin_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("admin_users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)   # sha256, hex
    prefix: Mapped[str] = mapped_column(String(16))   # shown in listings
    scopes: Mapped[list] = mapped_column(JSONB, default=list, server_default="[]")
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now())

    user: Mapped[AdminUser] = relationship(lazy="joined")


class RecoveryCode(Base):
    """A single-use code standing in for the second factor (a lost phone)."""
    __tablename__ = "admin_recovery_codes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("admin_users.id", ondelete="CASCADE"), index=True)
    code_hash: Mapped[str] = mapped_column(String(64), unique=True)   # sha256, hex
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
