"""The gateway's queue at saturation: plans.queue_timeout_ms, how long a consumer's
request waits for a slot of a saturated pool (NULL: its class's default), and
inference_logs.queue_wait, how long a shipped request waited (ms; NULL: no wait).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("plans", sa.Column("queue_timeout_ms", sa.Integer(), nullable=True))
    op.create_check_constraint("ck_plans_queue_timeout_range", "plans",
                               "queue_timeout_ms BETWEEN 0 AND 600000")
    op.add_column("inference_logs", sa.Column("queue_wait", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("inference_logs", "queue_wait")
    op.drop_constraint("ck_plans_queue_timeout_range", "plans", type_="check")
    op.drop_column("plans", "queue_timeout_ms")
