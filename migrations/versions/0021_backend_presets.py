"""Hosted vendors as presets: how a backend wants its requests, as data
(control_plane/services/presets.py fills these from a preset; docs/presets.md).

backends.preset            the preset that filled the backend (NULL: none)
backends.auth_header_name  the header auth_header goes in (NULL: Authorization)
backends.headers           other headers sent to it, e.g. {"anthropic-version": ...}
backends.paths             the gateway's backend path -> this backend's, e.g.
                           {"/v1/chat/completions": "/chat/completions"} (Azure)
backends.query             the query string sent with every request (api-version=...)
and the `gemini` protocol (lua/sluice/adapters/gemini.lua).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

OLD_PROTOCOLS = ("protocol IN ('openai', 'predict', 'kserve_v2', 'tfserving', 'vendor', "
                 "'openai_responses')")
NEW_PROTOCOLS = ("protocol IN ('openai', 'predict', 'kserve_v2', 'tfserving', 'vendor', "
                 "'openai_responses', 'gemini')")


def upgrade() -> None:
    op.add_column("backends", sa.Column("preset", sa.String(32), nullable=True))
    op.add_column("backends", sa.Column("auth_header_name", sa.String(64), nullable=True))
    op.add_column("backends", sa.Column("headers", JSONB(), nullable=True))
    op.add_column("backends", sa.Column("paths", JSONB(), nullable=True))
    op.add_column("backends", sa.Column("query", sa.String(1024), nullable=True))
    op.drop_constraint("ck_backends_protocol_known", "backends", type_="check")
    op.create_check_constraint("ck_backends_protocol_known", "backends", NEW_PROTOCOLS)


def downgrade() -> None:
    # Gemini backends cannot exist in the old schema.
    op.execute("DELETE FROM backends WHERE protocol = 'gemini'")
    op.drop_constraint("ck_backends_protocol_known", "backends", type_="check")
    op.create_check_constraint("ck_backends_protocol_known", "backends", OLD_PROTOCOLS)
    for column in ("query", "paths", "headers", "auth_header_name", "preset"):
        op.drop_column("backends", column)
