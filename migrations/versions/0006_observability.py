"""Observability: inference logs, the shipper's checkpoints, the append-only audit log.

Revision ID: 0006
Revises: 0007
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0007"
branch_labels = None
depends_on = None

APPEND_ONLY = """
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only (% refused)', TG_OP;
END $$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
"""


def upgrade() -> None:
    op.create_table(
        "inference_logs",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("gateway", sa.String(256), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("consumer", sa.String(128), nullable=True),
        sa.Column("plan", sa.String(128), nullable=True),
        sa.Column("model_name", sa.String(128), nullable=True),
        sa.Column("backend", sa.String(128), nullable=True),
        sa.Column("method", sa.String(16), nullable=True),
        sa.Column("path", sa.String(1024), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("latency", sa.Integer(), nullable=True),
        sa.Column("upstream_latency", sa.Integer(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("cache_status", sa.String(16), nullable=True),
        sa.Column("error_type", sa.String(64), nullable=True),
        sa.Column("bytes_sent", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_inference_logs"),
    )
    op.create_index("ix_inference_logs_ts", "inference_logs", ["ts"])
    op.create_index("ix_inference_logs_request_id", "inference_logs", ["request_id"])
    op.create_index("ix_inference_logs_model_name_ts", "inference_logs", ["model_name", "ts"])
    op.create_table(
        "log_checkpoints",
        sa.Column("source", sa.String(256), nullable=False),
        sa.Column("inode", sa.BigInteger(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("source", "inode", name="pk_log_checkpoints"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("resource", sa.String(32), nullable=False),
        sa.Column("resource_id", sa.BigInteger(), nullable=True),
        sa.Column("before", postgresql.JSONB(), nullable=True),
        sa.Column("after", postgresql.JSONB(), nullable=True),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
        sa.CheckConstraint("action IN ('create', 'update', 'delete')",
                           name="ck_audit_log_action_known"),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])
    op.create_index("ix_audit_log_resource_resource_id", "audit_log",
                    ["resource", "resource_id"])
    op.execute(APPEND_ONLY)


def downgrade() -> None:
    op.execute("DROP TABLE audit_log")  # drops its triggers
    op.execute("DROP FUNCTION audit_log_append_only()")
    op.drop_table("log_checkpoints")
    op.drop_index("ix_inference_logs_model_name_ts", table_name="inference_logs")
    op.drop_index("ix_inference_logs_request_id", table_name="inference_logs")
    op.drop_index("ix_inference_logs_ts", table_name="inference_logs")
    op.drop_table("inference_logs")
