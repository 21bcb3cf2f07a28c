"""Usage per consumer, model and UTC day, collected from the gateways' counters, and
each gateway's last collected counters (the cursor that makes collection idempotent);
models.mask_pii (PII masked in what is forwarded to the model's backends).

Revision ID: 0012
Revises: 0010
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("models", sa.Column("mask_pii", sa.Boolean(), nullable=False,
                                      server_default="false"))
    op.create_table(
        "usage_daily",
        sa.Column("consumer_id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("total_tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("consumer_id", "model", "day", name="pk_usage_daily"),
    )
    op.create_index("ix_usage_daily_day", "usage_daily", ["day"])
    op.create_table(
        "usage_cursors",
        sa.Column("gateway_id", sa.Integer(), nullable=False),
        sa.Column("boot", sa.String(64), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("counters", postgresql.JSONB(), nullable=False, server_default="{}"),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("gateway_id", name="pk_usage_cursors"),
        sa.ForeignKeyConstraint(["gateway_id"], ["gateways.id"], ondelete="CASCADE",
                                name="fk_usage_cursors_gateway_id_gateways"),
    )


def downgrade() -> None:
    op.drop_table("usage_cursors")
    op.drop_index("ix_usage_daily_day", table_name="usage_daily")
    op.drop_table("usage_daily")
    op.drop_column("models", "mask_pii")
