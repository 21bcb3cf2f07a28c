"""Scheduling: GPU telemetry (latest + short history), per-model weight coefficients.

Revision ID: 0005
Revises: 0004b
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004b"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("models", sa.Column("weight_coefficients", postgresql.JSONB(),
                                      nullable=True))
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(128), nullable=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("gpu_class", sa.String(64), nullable=False),
        sa.Column("backends", postgresql.JSONB(), nullable=False, server_default="[]"),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("memory_total_mb", sa.BigInteger(), nullable=False),
        sa.Column("memory_used_mb", sa.BigInteger(), nullable=False),
        sa.Column("utilization_pct", sa.Float(), nullable=True),
        sa.Column("temperature_c", sa.Float(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_gpus"),
        sa.UniqueConstraint("host", "gpu_index", name="uq_gpus_host"),
    )
    op.create_table(
        "gpu_samples",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("memory_total_mb", sa.BigInteger(), nullable=False),
        sa.Column("memory_used_mb", sa.BigInteger(), nullable=False),
        sa.Column("utilization_pct", sa.Float(), nullable=True),
        sa.Column("temperature_c", sa.Float(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_gpu_samples"),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], ondelete="CASCADE",
                                name="fk_gpu_samples_gpu_id_gpus"),
    )
    op.create_index("ix_gpu_samples_gpu_id", "gpu_samples", ["gpu_id", "at"])


def downgrade() -> None:
    op.drop_index("ix_gpu_samples_gpu_id", table_name="gpu_samples")
    op.drop_table("gpu_samples")
    op.drop_table("gpus")
    op.drop_column("models", "weight_coefficients")
