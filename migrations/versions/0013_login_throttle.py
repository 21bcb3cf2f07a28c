"""Admin UI sign-in throttling: wrong passwords in a row per admin user, and the end
of the lock they caused.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("admin_users", sa.Column("failed_logins", sa.Integer(), nullable=False,
                                           server_default="0"))
    op.add_column("admin_users", sa.Column("locked_until", sa.DateTime(timezone=True),
                                           nullable=True))


def downgrade() -> None:
    op.drop_column("admin_users", "locked_until")
    op.drop_column("admin_users", "failed_logins")
