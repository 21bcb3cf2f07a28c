"""Backend protocol openai_responses: a backend that speaks the OpenAI Responses API
(POST /v1/responses) natively.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03
"""
from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

OLD_PROTOCOLS = "protocol IN ('openai', 'predict', 'kserve_v2', 'tfserving', 'vendor')"
NEW_PROTOCOLS = ("protocol IN ('openai', 'predict', 'kserve_v2', 'tfserving', 'vendor', "
                 "'openai_responses')")


def upgrade() -> None:
    op.drop_constraint("ck_backends_protocol_known", "backends", type_="check")
    op.create_check_constraint("ck_backends_protocol_known", "backends", NEW_PROTOCOLS)


def downgrade() -> None:
    # Backends of the new protocol cannot exist in the old schema.
    op.execute("DELETE FROM backends WHERE protocol = 'openai_responses'")
    op.drop_constraint("ck_backends_protocol_known", "backends", type_="check")
    op.create_check_constraint("ck_backends_protocol_known", "backends", OLD_PROTOCOLS)
