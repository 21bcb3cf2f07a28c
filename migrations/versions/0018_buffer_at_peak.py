"""Buffering at peak: plans.buffer_at_peak, whether a best-effort request that a
saturated pool refuses becomes an async job (202 + Location) instead of a 503.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("plans", sa.Column("buffer_at_peak", sa.Boolean(), nullable=False,
                                     server_default=sa.false()))


def downgrade() -> None:
    op.drop_column("plans", "buffer_at_peak")
