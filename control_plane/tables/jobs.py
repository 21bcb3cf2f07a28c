"""Tables of async jobs, their webhook deliveries and the OpenAI Batch API's files and
batches (docs/contracts.md, "Async jobs"). Changed only through Alembic (0016)."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import (BigInteger, CheckConstraint, DateTime, ForeignKey, Integer,
                        LargeBinary, String, Text, func)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from control_plane.tables.base import Base

JOB_STATES = ("queued", "running", "succeeded", "failed", "cancelled")
FINAL_STATES = ("succeeded", "failed", "cancelled")
DELIVERY_STATES = ("pending", "delivered", "failed")
BATCH_STATES = ("validating", "in_progress", "finalizing", "completed", "failed",
                "cancelling", "cancelled", "expired")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN (" + ", ".join(f"'{v}'" for v in values) + ")"


class Job(Base):
    """One async request: what the caller sent, and (once it ran) the gateway's answer
    as the caller would have got it. Its status moves queued -> running -> a final
    state; every move is one guarded UPDATE (services/jobs.py), so a job ends once."""
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)     # job_<hex>
    consumer_id: Mapped[int] = mapped_column(
        ForeignKey("consumers.id", ondelete="CASCADE"), index=True)
    priority: Mapped[str] = mapped_column(String(16))
    method: Mapped[str] = mapped_column(String(8), default="POST", server_default="POST")
    path: Mapped[str] = mapped_column(String(1024))          # the inference endpoint
    model: Mapped[str | None] = mapped_column(String(128))
    content_type: Mapped[str | None] = mapped_column(String(128))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    callback_url: Mapped[str | None] = mapped_column(String(2048))
    status: Mapped[str] = mapped_column(String(16), default="queued",
                                        server_default="queued", index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # the answer, as the gateway gave it
    result_status: Mapped[int | None] = mapped_column(Integer)
    result_content_type: Mapped[str | None] = mapped_column(String(128))
    result_body: Mapped[bytes | None] = mapped_column(LargeBinary)
    error: Mapped[dict | None] = mapped_column(JSONB)
    # a batch's line: its batch and custom_id
    batch_id: Mapped[str | None] = mapped_column(
        ForeignKey("batches.id", ondelete="CASCADE"), index=True)
    custom_id: Mapped[str | None] = mapped_column(String(512))
    line: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # while running: until when the worker that took it owns it
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # while queued after a saturated answer: not to be tried before
    not_before: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (CheckConstraint(_in("status", JOB_STATES), name="status_known"),)


class WebhookSecret(Base):
    """A consumer's webhook signing key. Shown once when set; never returned again."""
    __tablename__ = "webhook_secrets"

    consumer_id: Mapped[int] = mapped_column(
        ForeignKey("consumers.id", ondelete="CASCADE"), primary_key=True)
    secret: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())


class WebhookDelivery(Base):
    """One POST of a finished job to its callback URL, retried until delivered or
    `give_up_at`; the admin API lists and re-sends them."""
    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"),
                                        index=True)
    url: Mapped[str] = mapped_column(String(2048))
    status: Mapped[str] = mapped_column(String(16), default="pending",
                                        server_default="pending", index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                      server_default=func.now())
    give_up_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (CheckConstraint(_in("status", DELIVERY_STATES), name="status_known"),)


class BatchFile(Base):
    """A file of the OpenAI Files API: a batch's input (JSONL the caller uploaded), or
    its output or error file (JSONL we wrote)."""
    __tablename__ = "batch_files"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)    # file-<hex>
    consumer_id: Mapped[int] = mapped_column(
        ForeignKey("consumers.id", ondelete="CASCADE"), index=True)
    purpose: Mapped[str] = mapped_column(String(32))
    filename: Mapped[str] = mapped_column(String(512))
    content: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())


class Batch(Base):
    """An OpenAI batch: one job per input line, on the job machinery."""
    __tablename__ = "batches"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)    # batch_<hex>
    consumer_id: Mapped[int] = mapped_column(
        ForeignKey("consumers.id", ondelete="CASCADE"), index=True)
    endpoint: Mapped[str] = mapped_column(String(256))
    input_file_id: Mapped[str] = mapped_column(ForeignKey("batch_files.id"))
    output_file_id: Mapped[str | None] = mapped_column(String(40))
    error_file_id: Mapped[str | None] = mapped_column(String(40))
    completion_window: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    total: Mapped[int] = mapped_column(Integer)
    metadata_: Mapped[dict | None] = mapped_column("metadata", JSONB)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())
    in_progress_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finalizing_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancelling_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (CheckConstraint(_in("status", BATCH_STATES), name="status_known"),)
