"""Adapters: more backend protocols (kserve_v2, tfserving, vendor) and vendor mappings.

Revision ID: 0004
Revises: 0006
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0006"
branch_labels = None
depends_on = None

OLD_PROTOCOLS = "protocol IN ('openai', 'predict')"
NEW_PROTOCOLS = "protocol IN ('openai', 'predict', 'kserve_v2', 'tfserving', 'vendor')"


def upgrade() -> None:
    op.create_table(
        "mappings",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("request", postgresql.JSONB(), nullable=False),
        sa.Column("response", postgresql.JSONB(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_mappings"),
        sa.UniqueConstraint("name", name="uq_mappings_name"),
    )
    op.add_column("backends", sa.Column("mapping_id", sa.Integer(), nullable=True))
    op.create_foreign_key("fk_backends_mapping_id_mappings", "backends", "mappings",
                          ["mapping_id"], ["id"], ondelete="RESTRICT")
    op.create_index("ix_backends_mapping_id", "backends", ["mapping_id"])
    op.drop_constraint("ck_backends_protocol_known", "backends", type_="check")
    op.create_check_constraint("ck_backends_protocol_known", "backends", NEW_PROTOCOLS)
    op.create_check_constraint("ck_backends_vendor_mapping", "backends",
                               "(protocol = 'vendor') = (mapping_id IS NOT NULL)")


def downgrade() -> None:
    # Backends of the new protocols cannot exist in the old schema.
    op.execute("DELETE FROM backends WHERE protocol NOT IN ('openai', 'predict')")
    op.drop_constraint("ck_backends_vendor_mapping", "backends", type_="check")
    op.drop_constraint("ck_backends_protocol_known", "backends", type_="check")
    op.create_check_constraint("ck_backends_protocol_known", "backends", OLD_PROTOCOLS)
    op.drop_index("ix_backends_mapping_id", table_name="backends")
    op.drop_constraint("fk_backends_mapping_id_mappings", "backends", type_="foreignkey")
    op.drop_column("backends", "mapping_id")
    op.drop_table("mappings")
