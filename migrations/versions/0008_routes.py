"""Routes: a public model name split between versions (canary, A/B, conditions on
consumer attributes).

Revision ID: 0008
Revises: 0005
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "routes",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("sticky", sa.Boolean(), nullable=False, server_default="true"),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default="true"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_routes"),
        sa.UniqueConstraint("name", name="uq_routes_name"),
    )
    op.create_table(
        "route_versions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("route_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("percent", sa.Integer(), nullable=False),
        sa.Column("conditions", postgresql.JSONB(), nullable=False, server_default="[]"),
        sa.PrimaryKeyConstraint("id", name="pk_route_versions"),
        sa.ForeignKeyConstraint(["route_id"], ["routes.id"], ondelete="CASCADE",
                                name="fk_route_versions_route_id_routes"),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], ondelete="RESTRICT",
                                name="fk_route_versions_model_id_models"),
        sa.UniqueConstraint("route_id", "position", name="uq_route_versions_route_id"),
        sa.CheckConstraint("percent >= 0 AND percent <= 100",
                           name="ck_route_versions_percent_range"),
    )
    op.create_index("ix_route_versions_model_id", "route_versions", ["model_id"])


def downgrade() -> None:
    op.drop_index("ix_route_versions_model_id", table_name="route_versions")
    op.drop_table("route_versions")
    op.drop_table("routes")
