"""Affinity and scraping: GPU class of models and backends, Prometheus endpoints of
backends, and the controller's scrapes of them (latest + short history).

Revision ID: 0011
Revises: 0008
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("models", sa.Column("gpu_class", sa.String(64), nullable=True))
    op.add_column("backends", sa.Column("gpu_class", sa.String(64), nullable=True))
    op.add_column("backends", sa.Column("metrics_url", sa.String(2048), nullable=True))
    op.add_column("backends", sa.Column("metrics_format", sa.String(16), nullable=True))
    op.create_check_constraint(op.f("ck_backends_metrics_pair"), "backends",
                               "(metrics_url IS NULL) = (metrics_format IS NULL)")
    op.create_check_constraint(op.f("ck_backends_metrics_format_known"), "backends",
                               "metrics_format IN ('vllm', 'triton', 'dcgm')")
    op.create_table(
        "backend_scrapes",
        sa.Column("backend_id", sa.Integer(), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("free_fraction", sa.Float(), nullable=True),
        sa.Column("values", postgresql.JSONB(), nullable=False, server_default="{}"),
        sa.Column("scraped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("backend_id", name="pk_backend_scrapes"),
        sa.ForeignKeyConstraint(["backend_id"], ["backends.id"], ondelete="CASCADE",
                                name="fk_backend_scrapes_backend_id_backends"),
    )
    op.create_table(
        "backend_scrape_samples",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("backend_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("free_fraction", sa.Float(), nullable=True),
        sa.Column("values", postgresql.JSONB(), nullable=False, server_default="{}"),
        sa.PrimaryKeyConstraint("id", name="pk_backend_scrape_samples"),
        sa.ForeignKeyConstraint(["backend_id"], ["backends.id"], ondelete="CASCADE",
                                name="fk_backend_scrape_samples_backend_id_backends"),
    )
    op.create_index("ix_backend_scrape_samples_backend_id", "backend_scrape_samples",
                    ["backend_id", "at"])


def downgrade() -> None:
    op.drop_index("ix_backend_scrape_samples_backend_id",
                  table_name="backend_scrape_samples")
    op.drop_table("backend_scrape_samples")
    op.drop_table("backend_scrapes")
    op.drop_column("backends", "metrics_format")
    op.drop_column("backends", "metrics_url")
    op.drop_column("backends", "gpu_class")
    op.drop_column("models", "gpu_class")
