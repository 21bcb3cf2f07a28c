"""Resilience: a model's fallback on timeout; backend readiness from health checks.

Revision ID: 0009
Revises: 0011
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # By name (unique), so a rename follows; deleting a model that is another's
    # fallback is refused (the admin API says which).
    op.add_column("models", sa.Column("fallback_model", sa.String(128), nullable=True))
    op.create_foreign_key("fk_models_fallback_model_models", "models", "models",
                          ["fallback_model"], ["name"], onupdate="CASCADE",
                          ondelete="RESTRICT")
    op.create_check_constraint("ck_models_fallback_not_self", "models",
                               "fallback_model <> name")
    op.create_table(
        "backend_health",
        sa.Column("backend_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("detail", sa.String(256), nullable=False, server_default=""),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("backend_id", name="pk_backend_health"),
        sa.ForeignKeyConstraint(["backend_id"], ["backends.id"], ondelete="CASCADE",
                                name="fk_backend_health_backend_id_backends"),
    )


def downgrade() -> None:
    op.drop_table("backend_health")
    op.drop_constraint("ck_models_fallback_not_self", "models", type_="check")
    op.drop_constraint("fk_models_fallback_model_models", "models", type_="foreignkey")
    op.drop_column("models", "fallback_model")
