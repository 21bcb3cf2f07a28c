"""Audio and image models: models.media_tasks (the audio and image work a model does:
"transcription", "translation", "speech", "image"; NULL: none) and
models.max_request_bytes (the largest request body it takes; NULL: 25 MiB on the audio
and image endpoints, the gateway's limit elsewhere); mappings.transport (how an upload
travels to a vendor: upload, field, content_type, query, headers, defaults);
usage_daily.audio_ms, input_chars, images (what audio and image work bills by);
plans.max_audio_seconds_per_day, max_speech_chars_per_day, max_images_per_day.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

USAGE_COLUMNS = ("audio_ms", "input_chars", "images")
PLAN_CAPS = ("max_audio_seconds_per_day", "max_speech_chars_per_day", "max_images_per_day")


def upgrade() -> None:
    op.add_column("models", sa.Column("media_tasks", JSONB(), nullable=True))
    op.add_column("models", sa.Column("max_request_bytes", sa.BigInteger(), nullable=True))
    op.create_check_constraint("ck_models_max_request_bytes_positive", "models",
                               "max_request_bytes > 0")
    op.add_column("mappings", sa.Column("transport", JSONB(), nullable=True))
    for column in PLAN_CAPS:
        op.add_column("plans", sa.Column(column, sa.BigInteger(), nullable=True))
    for column in USAGE_COLUMNS:
        op.add_column("usage_daily", sa.Column(column, sa.BigInteger(), nullable=False,
                                               server_default="0"))


def downgrade() -> None:
    for column in PLAN_CAPS:
        op.drop_column("plans", column)
    for column in USAGE_COLUMNS:
        op.drop_column("usage_daily", column)
    op.drop_column("mappings", "transport")
    op.drop_constraint("ck_models_max_request_bytes_positive", "models", type_="check")
    op.drop_column("models", "max_request_bytes")
    op.drop_column("models", "media_tasks")
