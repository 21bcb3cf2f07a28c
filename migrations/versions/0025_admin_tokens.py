"""Admin identities: personal API tokens (admin_tokens: sha256 of the token, scopes,
expiry, revocation, last use), service accounts (admin_users.password_hash may be NULL),
the TOTP second factor (admin_users.totp_secret, totp_confirmed_at, totp_last_step) and
its single-use recovery codes (admin_recovery_codes, hashed).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("admin_users", "password_hash", existing_type=sa.String(256),
                    nullable=True)
    op.add_column("admin_users", sa.Column("totp_secret", sa.String(64), nullable=True))
    op.add_column("admin_users", sa.Column("totp_confirmed_at", sa.DateTime(timezone=True),
                                           nullable=True))
    op.add_column("admin_users", sa.Column("totp_last_step", sa.BigInteger(), nullable=True))
    op.create_table(
        "admin_tokens",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("user_id", sa.Integer(),
                  sa.ForeignKey("admin_users.id", ondelete="CASCADE",
                                name="fk_admin_tokens_user_id_admin_users"), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("scopes", JSONB(), nullable=False, server_default="[]"),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_admin_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_admin_tokens_token_hash"),
    )
    op.create_index("ix_admin_tokens_user_id", "admin_tokens", ["user_id"])
    op.create_table(
        "admin_recovery_codes",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("user_id", sa.Integer(),
                  sa.ForeignKey("admin_users.id", ondelete="CASCADE",
                                name="fk_admin_recovery_codes_user_id_admin_users"),
                  nullable=False),
        sa.Column("code_hash", sa.String(64), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_admin_recovery_codes"),
        sa.UniqueConstraint("code_hash", name="uq_admin_recovery_codes_code_hash"),
    )
    op.create_index("ix_admin_recovery_codes_user_id", "admin_recovery_codes", ["user_id"])


def downgrade() -> None:
    op.drop_table("admin_recovery_codes")
    op.drop_table("admin_tokens")
    op.drop_column("admin_users", "totp_last_step")
    op.drop_column("admin_users", "totp_confirmed_at")
    op.drop_column("admin_users", "totp_secret")
    # service accounts have no password to keep in the old schema
    op.execute("DELETE FROM admin_users WHERE password_hash IS NULL")
    op.alter_column("admin_users", "password_hash", existing_type=sa.String(256),
                    nullable=False)
