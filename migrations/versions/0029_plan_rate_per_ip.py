"""plans.rate_per_ip: requests per second per client address of the plan's callers
(lua/sluice/ip_limit.lua); NULL: no per-IP limit of the plan.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("plans", sa.Column("rate_per_ip", sa.Float(), nullable=True))
    op.create_check_constraint("ck_plans_rate_per_ip_positive", "plans", "rate_per_ip > 0")


def downgrade() -> None:
    op.drop_constraint("ck_plans_rate_per_ip_positive", "plans", type_="check")
    op.drop_column("plans", "rate_per_ip")
