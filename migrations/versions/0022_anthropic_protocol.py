"""Backend protocol `anthropic` (Anthropic's Messages API, lua/sluice/adapters/anthropic.lua).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-03
"""
from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

OLD_PROTOCOLS = ("protocol IN ('openai', 'predict', 'kserve_v2', 'tfserving', 'vendor', "
                 "'openai_responses', 'gemini')")
NEW_PROTOCOLS = ("protocol IN ('openai', 'predict', 'kserve_v2', 'tfserving', 'vendor', "
                 "'openai_responses', 'gemini', 'anthropic')")


def upgrade() -> None:
    op.drop_constraint("ck_backends_protocol_known", "backends", type_="check")
    op.create_check_constraint("ck_backends_protocol_known", "backends", NEW_PROTOCOLS)


def downgrade() -> None:
    # Backends of the new protocol cannot exist in the old schema.
    op.execute("DELETE FROM backends WHERE protocol = 'anthropic'")
    op.drop_constraint("ck_backends_protocol_known", "backends", type_="check")
    op.create_check_constraint("ck_backends_protocol_known", "backends", OLD_PROTOCOLS)
