"""Personal and health data policies: models.phi_policy and consumers.phi_policy
({"<class>": "mask" | "block" | "log", "*": the rest}; NULL: none; a consumer's
overrides its models'), checked by the API against control_plane/services/phi_classes.py.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("models", sa.Column("phi_policy", JSONB(), nullable=True))
    op.add_column("consumers", sa.Column("phi_policy", JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("consumers", "phi_policy")
    op.drop_column("models", "phi_policy")
