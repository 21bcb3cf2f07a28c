"""Response cache settings per model: cache_ttl_s (300 s default, 0 = off), cache_shared.

Revision ID: 0004b
Revises: 0004
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004b"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("models", sa.Column("cache_ttl_s", sa.Integer(), nullable=False,
                                      server_default="300"))
    op.add_column("models", sa.Column("cache_shared", sa.Boolean(), nullable=False,
                                      server_default="false"))
    op.create_check_constraint("ck_models_cache_ttl_non_negative", "models",
                               "cache_ttl_s >= 0")


def downgrade() -> None:
    op.drop_constraint("ck_models_cache_ttl_non_negative", "models", type_="check")
    op.drop_column("models", "cache_shared")
    op.drop_column("models", "cache_ttl_s")
