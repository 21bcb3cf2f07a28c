"""Async jobs: jobs, consumers' webhook secrets, webhook deliveries, and the OpenAI
Batch API's files and batches (control_plane/tables/jobs.py).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN (" + ", ".join(f"'{v}'" for v in values) + ")"


def upgrade() -> None:
    op.create_table(
        "batch_files",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("consumer_id", sa.Integer(), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("filename", sa.String(512), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["consumer_id"], ["consumers.id"], ondelete="CASCADE",
                                name=op.f("fk_batch_files_consumer_id_consumers")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batch_files")),
    )
    op.create_index(op.f("ix_batch_files_consumer_id"), "batch_files", ["consumer_id"])
    op.create_table(
        "batches",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("consumer_id", sa.Integer(), nullable=False),
        sa.Column("endpoint", sa.String(256), nullable=False),
        sa.Column("input_file_id", sa.String(40), nullable=False),
        sa.Column("output_file_id", sa.String(40), nullable=True),
        sa.Column("error_file_id", sa.String(40), nullable=True),
        sa.Column("completion_window", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("metadata", JSONB(), nullable=True),
        sa.Column("created_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.Column("in_progress_at", TZ, nullable=True),
        sa.Column("finalizing_at", TZ, nullable=True),
        sa.Column("completed_at", TZ, nullable=True),
        sa.Column("cancelling_at", TZ, nullable=True),
        sa.Column("cancelled_at", TZ, nullable=True),
        sa.CheckConstraint(_in("status", ("validating", "in_progress", "finalizing",
                                          "completed", "failed", "cancelling", "cancelled",
                                          "expired")),
                           name=op.f("ck_batches_status_known")),
        sa.ForeignKeyConstraint(["consumer_id"], ["consumers.id"], ondelete="CASCADE",
                                name=op.f("fk_batches_consumer_id_consumers")),
        sa.ForeignKeyConstraint(["input_file_id"], ["batch_files.id"],
                                name=op.f("fk_batches_input_file_id_batch_files")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
    )
    op.create_index(op.f("ix_batches_consumer_id"), "batches", ["consumer_id"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("consumer_id", sa.Integer(), nullable=False),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("method", sa.String(8), server_default="POST", nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("model", sa.String(128), nullable=True),
        sa.Column("content_type", sa.String(128), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("callback_url", sa.String(2048), nullable=True),
        sa.Column("status", sa.String(16), server_default="queued", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("result_status", sa.Integer(), nullable=True),
        sa.Column("result_content_type", sa.String(128), nullable=True),
        sa.Column("result_body", sa.LargeBinary(), nullable=True),
        sa.Column("error", JSONB(), nullable=True),
        sa.Column("batch_id", sa.String(40), nullable=True),
        sa.Column("custom_id", sa.String(512), nullable=True),
        sa.Column("line", sa.Integer(), nullable=True),
        sa.Column("created_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.Column("enqueued_at", TZ, nullable=True),
        sa.Column("started_at", TZ, nullable=True),
        sa.Column("finished_at", TZ, nullable=True),
        sa.Column("lease_until", TZ, nullable=True),
        sa.Column("not_before", TZ, nullable=True),
        sa.CheckConstraint(_in("status", ("queued", "running", "succeeded", "failed",
                                          "cancelled")),
                           name=op.f("ck_jobs_status_known")),
        sa.ForeignKeyConstraint(["consumer_id"], ["consumers.id"], ondelete="CASCADE",
                                name=op.f("fk_jobs_consumer_id_consumers")),
        sa.ForeignKeyConstraint(["batch_id"], ["batches.id"], ondelete="CASCADE",
                                name=op.f("fk_jobs_batch_id_batches")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_consumer_id"), "jobs", ["consumer_id"])
    op.create_index(op.f("ix_jobs_status"), "jobs", ["status"])
    op.create_index(op.f("ix_jobs_batch_id"), "jobs", ["batch_id"])
    op.create_table(
        "webhook_secrets",
        sa.Column("consumer_id", sa.Integer(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("created_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["consumer_id"], ["consumers.id"], ondelete="CASCADE",
                                name=op.f("fk_webhook_secrets_consumer_id_consumers")),
        sa.PrimaryKeyConstraint("consumer_id", name=op.f("pk_webhook_secrets")),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("job_id", sa.String(40), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("status", sa.String(16), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.Column("next_attempt_at", TZ, server_default=sa.func.now(), nullable=False),
        sa.Column("give_up_at", TZ, nullable=False),
        sa.Column("delivered_at", TZ, nullable=True),
        sa.CheckConstraint(_in("status", ("pending", "delivered", "failed")),
                           name=op.f("ck_webhook_deliveries_status_known")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE",
                                name=op.f("fk_webhook_deliveries_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index(op.f("ix_webhook_deliveries_job_id"), "webhook_deliveries", ["job_id"])
    op.create_index(op.f("ix_webhook_deliveries_status"), "webhook_deliveries", ["status"])


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_secrets")
    op.drop_table("jobs")
    op.drop_table("batches")
    op.drop_table("batch_files")
