"""Fleet membership and controller failover: gateways that register themselves and
heartbeat (registered, boot_id, sluice_version, last_seen_at, left_at; internal_url
no longer unique, so a new member may reuse the address of one that left), and the
controller processes (which one is active is the advisory lock's say).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("gateways", sa.Column("registered", sa.Boolean(), nullable=False,
                                        server_default="false"))
    op.add_column("gateways", sa.Column("boot_id", sa.String(64), nullable=True))
    op.add_column("gateways", sa.Column("sluice_version", sa.String(64), nullable=True))
    op.add_column("gateways", sa.Column("last_seen_at", sa.DateTime(timezone=True),
                                        nullable=True))
    op.add_column("gateways", sa.Column("left_at", sa.DateTime(timezone=True), nullable=True))
    op.drop_constraint("uq_gateways_internal_url", "gateways", type_="unique")
    op.create_index("ix_gateways_internal_url", "gateways", ["internal_url"])
    op.create_table(
        "controllers",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("active_since", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("controllers")
    op.drop_index("ix_gateways_internal_url", "gateways")
    # members that reused an address would break the old constraint: keep the newest
    op.execute("DELETE FROM gateways a USING gateways b "
               "WHERE a.internal_url = b.internal_url AND a.id < b.id")
    op.create_unique_constraint("uq_gateways_internal_url", "gateways", ["internal_url"])
    for column in ("left_at", "last_seen_at", "sluice_version", "boot_id", "registered"):
        op.drop_column("gateways", column)
