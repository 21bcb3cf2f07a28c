"""Priority admission: plans' priority class and header switch, backends' capacity.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("plans", sa.Column("priority", sa.String(16), nullable=False,
                                     server_default="standard"))
    op.add_column("plans", sa.Column("priority_header", sa.Boolean(), nullable=False,
                                     server_default="false"))
    op.create_check_constraint(
        "ck_plans_priority_known", "plans",
        "priority IN ('critical', 'standard', 'best_effort')")
    op.add_column("backends", sa.Column("max_in_flight", sa.Integer(), nullable=True))
    op.create_check_constraint("ck_backends_max_in_flight_positive", "backends",
                               "max_in_flight > 0")


def downgrade() -> None:
    op.drop_constraint("ck_backends_max_in_flight_positive", "backends", type_="check")
    op.drop_column("backends", "max_in_flight")
    op.drop_constraint("ck_plans_priority_known", "plans", type_="check")
    op.drop_column("plans", "priority_header")
    op.drop_column("plans", "priority")
