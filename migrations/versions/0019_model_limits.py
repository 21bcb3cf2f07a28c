"""Model limits and the model-type map: models.max_output_tokens (the most tokens one
answer may ask for; NULL: the gateway's default bound), and model_types (brief 000's
`model_type`, e.g. "nlp/sentiment", -> the model or route that serves it).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("models", sa.Column("max_output_tokens", sa.Integer(), nullable=True))
    op.create_check_constraint("ck_models_max_output_tokens_positive", "models",
                               "max_output_tokens > 0")
    op.create_table(
        "model_types",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("model_type", sa.String(128), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_model_types"),
        sa.UniqueConstraint("model_type", name="uq_model_types_model_type"),
    )


def downgrade() -> None:
    op.drop_table("model_types")
    op.drop_constraint("ck_models_max_output_tokens_positive", "models", type_="check")
    op.drop_column("models", "max_output_tokens")
