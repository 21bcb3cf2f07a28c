"""Policy: plans (rate limits, concurrency, quotas) with a consumer's plan, JWT
verification keys, per-backend credentials, content policies (term lists).

Revision ID: 0003
Revises: 0001
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0001"
branch_labels = None
depends_on = None


def _timestamps() -> list[sa.Column]:
    return [
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
    ]


def upgrade() -> None:
    op.create_table(
        "plans",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("rate_per_second", sa.Float(), nullable=False, server_default="100"),
        sa.Column("burst", sa.Integer(), nullable=True),
        sa.Column("max_concurrent", sa.Integer(), nullable=True),
        sa.Column("daily_requests", sa.BigInteger(), nullable=True),
        sa.Column("monthly_requests", sa.BigInteger(), nullable=True),
        sa.Column("monthly_tokens", sa.BigInteger(), nullable=True),
        sa.Column("model_overrides", postgresql.JSONB(), nullable=False,
                  server_default="{}"),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_plans"),
        sa.UniqueConstraint("name", name="uq_plans_name"),
        sa.CheckConstraint("rate_per_second > 0", name="ck_plans_rate_positive"),
    )
    op.add_column("consumers", sa.Column("plan_id", sa.Integer(), nullable=True))
    op.create_foreign_key("fk_consumers_plan_id_plans", "consumers", "plans",
                          ["plan_id"], ["id"], ondelete="RESTRICT")
    op.create_index("ix_consumers_plan_id", "consumers", ["plan_id"])
    op.add_column("backends", sa.Column("auth_header", sa.Text(), nullable=True))
    op.create_table(
        "jwt_issuers",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("keys", postgresql.JSONB(), nullable=False),
        sa.Column("issuer", sa.String(512), nullable=True),
        sa.Column("audience", sa.String(512), nullable=True),
        sa.Column("consumer_claim", sa.String(64), nullable=False, server_default="sub"),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default="true"),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_jwt_issuers"),
        sa.UniqueConstraint("name", name="uq_jwt_issuers_name"),
    )
    op.create_table(
        "content_policies",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("model", sa.String(128), nullable=True),
        sa.Column("terms", postgresql.JSONB(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default="true"),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_content_policies"),
        sa.UniqueConstraint("name", name="uq_content_policies_name"),
    )


def downgrade() -> None:
    op.drop_table("content_policies")
    op.drop_table("jwt_issuers")
    op.drop_column("backends", "auth_header")
    op.drop_index("ix_consumers_plan_id", table_name="consumers")
    op.drop_constraint("fk_consumers_plan_id_plans", "consumers", type_="foreignkey")
    op.drop_column("consumers", "plan_id")
    op.drop_table("plans")
