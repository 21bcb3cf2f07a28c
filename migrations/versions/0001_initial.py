"""Initial schema: models, backends, consumers, API keys, gateways, config state.

Revision ID: 0001
Revises:
Create Date: 2026-01-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _timestamps() -> list[sa.Column]:
    return [
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
    ]


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("timeout_ms", sa.Integer(), nullable=False, server_default="60000"),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default="true"),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_models"),
        sa.UniqueConstraint("name", name="uq_models_name"),
        sa.CheckConstraint("timeout_ms > 0", name="ck_models_timeout_positive"),
    )
    op.create_table(
        "backends",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("protocol", sa.String(32), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False, server_default="100"),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default="true"),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_backends"),
        sa.UniqueConstraint("name", name="uq_backends_name"),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], ondelete="RESTRICT",
                                name="fk_backends_model_id_models"),
        sa.CheckConstraint("weight >= 0 AND weight <= 1000", name="ck_backends_weight_range"),
        sa.CheckConstraint("protocol IN ('openai', 'predict')",
                           name="ck_backends_protocol_known"),
    )
    op.create_index("ix_backends_model_id", "backends", ["model_id"])
    op.create_table(
        "consumers",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("allowed_models", postgresql.JSONB(), nullable=True),
        sa.Column("attributes", postgresql.JSONB(), nullable=False, server_default="{}"),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default="true"),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_consumers"),
        sa.UniqueConstraint("name", name="uq_consumers_name"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("consumer_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False, server_default=""),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default="true"),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
        sa.ForeignKeyConstraint(["consumer_id"], ["consumers.id"], ondelete="CASCADE",
                                name="fk_api_keys_consumer_id_consumers"),
    )
    op.create_index("ix_api_keys_consumer_id", "api_keys", ["consumer_id"])
    op.create_table(
        "gateways",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("internal_url", sa.String(2048), nullable=False),
        sa.Column("acked_version", sa.BigInteger(), nullable=True),
        sa.Column("last_push_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_gateways"),
        sa.UniqueConstraint("name", name="uq_gateways_name"),
        sa.UniqueConstraint("internal_url", name="uq_gateways_internal_url"),
    )
    config_state = op.create_table(
        "config_state",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_config_state"),
        sa.CheckConstraint("id = 1", name="ck_config_state_single_row"),
    )
    op.bulk_insert(config_state, [{"id": 1, "version": 1}])


def downgrade() -> None:
    op.drop_table("config_state")
    op.drop_table("gateways")
    op.drop_index("ix_api_keys_consumer_id", table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_table("consumers")
    op.drop_index("ix_backends_model_id", table_name="backends")
    op.drop_table("backends")
    op.drop_table("models")
