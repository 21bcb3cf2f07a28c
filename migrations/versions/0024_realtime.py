"""Realtime sessions: the backend protocol openai_realtime (OpenAI's Realtime API over
a WebSocket, GET /v1/realtime), and two plan caps on realtime sessions:
plans.realtime_sessions (open at once per consumer, per gateway) and
plans.realtime_session_s (the longest a session may last); NULL: no cap; and
usage_daily.session_seconds (realtime sessions' length, each rounded up to a second).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

OLD_PROTOCOLS = ("protocol IN ('openai', 'predict', 'kserve_v2', 'tfserving', 'vendor', "
                 "'openai_responses', 'gemini', 'anthropic')")
NEW_PROTOCOLS = ("protocol IN ('openai', 'predict', 'kserve_v2', 'tfserving', 'vendor', "
                 "'openai_responses', 'gemini', 'anthropic', 'openai_realtime')")


def upgrade() -> None:
    op.drop_constraint("ck_backends_protocol_known", "backends", type_="check")
    op.create_check_constraint("ck_backends_protocol_known", "backends", NEW_PROTOCOLS)
    op.add_column("plans", sa.Column("realtime_sessions", sa.Integer(), nullable=True))
    op.add_column("plans", sa.Column("realtime_session_s", sa.Integer(), nullable=True))
    op.create_check_constraint("ck_plans_realtime_sessions_positive", "plans",
                               "realtime_sessions > 0")
    op.create_check_constraint("ck_plans_realtime_session_s_positive", "plans",
                               "realtime_session_s > 0")
    op.add_column("usage_daily", sa.Column("session_seconds", sa.BigInteger(),
                                           nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("usage_daily", "session_seconds")
    op.drop_constraint("ck_plans_realtime_session_s_positive", "plans", type_="check")
    op.drop_constraint("ck_plans_realtime_sessions_positive", "plans", type_="check")
    op.drop_column("plans", "realtime_session_s")
    op.drop_column("plans", "realtime_sessions")
    # Backends of the new protocol cannot exist in the old schema.
    op.execute("DELETE FROM backends WHERE protocol = 'openai_realtime'")
    op.drop_constraint("ck_backends_protocol_known", "backends", type_="check")
    op.create_check_constraint("ck_backends_protocol_known", "backends", OLD_PROTOCOLS)
