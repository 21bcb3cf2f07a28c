"""Admin UI: admin users (hashed passwords, role admin|viewer); a backend's weight
before it was drained, so the UI can restore it.

Revision ID: 0007
Revises: 0003
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "admin_users",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("password_hash", sa.String(256), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default="true"),
        sa.Column("last_login_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_admin_users"),
        sa.UniqueConstraint("username", name="uq_admin_users_username"),
        sa.CheckConstraint("role IN ('admin', 'viewer')", name="ck_admin_users_role_known"),
    )
    op.add_column("backends", sa.Column("drained_weight", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("backends", "drained_weight")
    op.drop_table("admin_users")
