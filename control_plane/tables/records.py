"""Database schema, part two: what the control plane observes and records rather than
what operators configure (tables/config.py) — backend health, GPU telemetry and
scrapes, usage per day, the shipped inference log and its checkpoint, the audit log,
the controller processes.
Changed only through Alembic."""
from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import (BigInteger, CheckConstraint, Date, DateTime, Float, ForeignKey, Identity,
                        Index, Integer, LargeBinary, String, Text, UniqueConstraint, func, text)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from control_plane.tables.base import Base


class BackendHealth(Base):
    """A backend's readiness as the controller's health checks last saw it; written
    when the state changes (control_plane/controller/health_loop.py)."""
    __tablename__ = "backend_health"

    backend_id: Mapped[int] = mapped_column(
        ForeignKey("backends.id", ondelete="CASCADE"), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))   # ready, loading, unreachable
    detail: Mapped[str] = mapped_column(String(256), default="", server_default="")
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class InferenceLog(Base):
    """One request answered by a gateway, shipped from its JSON access log.

    `latency`, `upstream_latency` and `queue_wait` (time waited in the gateway's queue
    for a slot; NULL: no wait) are milliseconds; `ts` is when the answer ended.
    Rows are only ever appended by the shipper and removed by retention.
    """
    __tablename__ = "inference_logs"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    ts: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    gateway: Mapped[str] = mapped_column(String(256))
    request_id: Mapped[str] = mapped_column(String(128), index=True)
    consumer: Mapped[str | None] = mapped_column(String(128))
    plan: Mapped[str | None] = mapped_column(String(128))
    model_name: Mapped[str | None] = mapped_column(String(128))
    backend: Mapped[str | None] = mapped_column(String(128))
    method: Mapped[str | None] = mapped_column(String(16))
    path: Mapped[str | None] = mapped_column(String(1024))
    status: Mapped[int] = mapped_column(Integer)
    latency: Mapped[int | None] = mapped_column(Integer)
    upstream_latency: Mapped[int | None] = mapped_column(Integer)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    cache_status: Mapped[str | None] = mapped_column(String(16))
    error_type: Mapped[str | None] = mapped_column(String(64))
    bytes_sent: Mapped[int | None] = mapped_column(BigInteger)
    queue_wait: Mapped[int | None] = mapped_column(Integer)
    # the hash chain of this row's source (`gateway`), services/log_chain.py; NULL in
    # rows shipped before the chain began. No index: one per row costs the shipper
    # a fifth of its rate, and within a chain id order is chain order (one writer)
    chain_seq: Mapped[int | None] = mapped_column(BigInteger)
    prev_hash: Mapped[bytes | None] = mapped_column(LargeBinary)
    row_hash: Mapped[bytes | None] = mapped_column(LargeBinary)

    __table_args__ = (Index("ix_inference_logs_model_name_ts", "model_name", "ts"),)


class LogCheckpoint(Base):
    """How far the shipper got in one access-log file (by inode) of one source.

    Updated in the transaction that inserts the rows read up to `offset`.
    """
    __tablename__ = "log_checkpoints"

    source: Mapped[str] = mapped_column(String(256), primary_key=True)
    inode: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    offset: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now())


class AuditEntry(Base):
    """One admin change. Append-only: a trigger refuses UPDATE, DELETE and TRUNCATE;
    another (BEFORE INSERT) fills the chain columns (services/log_chain.py)."""
    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(),
                                         index=True)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(16))
    resource: Mapped[str] = mapped_column(String(32))
    resource_id: Mapped[int | None] = mapped_column(BigInteger)
    before: Mapped[dict | None] = mapped_column(JSONB)
    after: Mapped[dict | None] = mapped_column(JSONB)
    request_id: Mapped[str | None] = mapped_column(String(128))
    chain_seq: Mapped[int | None] = mapped_column(BigInteger, index=True)
    prev_hash: Mapped[bytes | None] = mapped_column(LargeBinary)
    row_hash: Mapped[bytes | None] = mapped_column(LargeBinary)

    __table_args__ = (
        CheckConstraint("action IN ('create', 'update', 'delete')", name="action_known"),
        Index("ix_audit_log_resource_resource_id", "resource", "resource_id"),
    )


class LogChain(Base):
    """The head of one hash chain: "audit", or "inference:<source>" per shipping
    source. `seq` and `head_hash` are the last row's; `anchored_*` the last anchor's.
    Moved in the transaction that appends to the chain (its row lock orders writers)."""
    __tablename__ = "log_chains"

    name: Mapped[str] = mapped_column(String(300), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, server_default="0")
    head_hash: Mapped[bytes] = mapped_column(
        LargeBinary, server_default=text("decode(repeat('00', 32), 'hex')"))
    head_row_id: Mapped[int | None] = mapped_column(BigInteger)
    anchored_seq: Mapped[int] = mapped_column(BigInteger, server_default="0")
    anchored_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                  server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())


class LogAnchor(Base):
    """A chain's head at one moment (`periodic`), or the last row retention removed
    (`retention`): what an operator exports and keeps elsewhere."""
    __tablename__ = "log_anchors"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    chain: Mapped[str] = mapped_column(String(300))
    seq: Mapped[int] = mapped_column(BigInteger)
    row_id: Mapped[int | None] = mapped_column(BigInteger)
    head_hash: Mapped[bytes] = mapped_column(LargeBinary)
    kind: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        CheckConstraint("kind IN ('periodic', 'retention')", name="kind_known"),
        Index("ix_log_anchors_chain_seq", "chain", "seq"),
    )


class Gpu(Base):
    """One GPU as its host's agent last reported it (the latest values)."""
    __tablename__ = "gpus"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    gpu_index: Mapped[int] = mapped_column(Integer)
    uuid: Mapped[str | None] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(128))          # "NVIDIA A100-SXM4-80GB"
    gpu_class: Mapped[str] = mapped_column(String(64))      # "A100"
    # Names of the backends this GPU serves, as the agent's config maps them.
    backends: Mapped[list[str]] = mapped_column(JSONB, default=list, server_default="[]")
    source: Mapped[str] = mapped_column(String(16))         # "nvml" | "simulated"
    memory_total_mb: Mapped[int] = mapped_column(BigInteger)
    memory_used_mb: Mapped[int] = mapped_column(BigInteger)
    utilization_pct: Mapped[float | None] = mapped_column(Float)
    temperature_c: Mapped[float | None] = mapped_column(Float)
    power_w: Mapped[float | None] = mapped_column(Float)
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (UniqueConstraint("host", "gpu_index", name="uq_gpus_host"),)


class GpuSample(Base):
    """Short history of each GPU's readings, for charts; trimmed on ingest."""
    __tablename__ = "gpu_samples"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    memory_total_mb: Mapped[int] = mapped_column(BigInteger)
    memory_used_mb: Mapped[int] = mapped_column(BigInteger)
    utilization_pct: Mapped[float | None] = mapped_column(Float)
    temperature_c: Mapped[float | None] = mapped_column(Float)
    power_w: Mapped[float | None] = mapped_column(Float)

    __table_args__ = (Index("ix_gpu_samples_gpu_id", "gpu_id", "at"),)


class BackendScrape(Base):
    """The latest Prometheus scrape of one backend's `metrics_url` (services/scrapes.py).

    `scraped_at` is the last success; `attempted_at` and `error` the last try."""
    __tablename__ = "backend_scrapes"

    backend_id: Mapped[int] = mapped_column(
        ForeignKey("backends.id", ondelete="CASCADE"), primary_key=True)
    format: Mapped[str] = mapped_column(String(16))
    free_fraction: Mapped[float | None] = mapped_column(Float)
    values: Mapped[dict] = mapped_column(JSONB, default=dict, server_default="{}")
    scraped_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    attempted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    error: Mapped[str | None] = mapped_column(Text)


class BackendScrapeSample(Base):
    """Short history of successful scrapes, for charts; trimmed on write."""
    __tablename__ = "backend_scrape_samples"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    backend_id: Mapped[int] = mapped_column(ForeignKey("backends.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    free_fraction: Mapped[float | None] = mapped_column(Float)
    values: Mapped[dict] = mapped_column(JSONB, default=dict, server_default="{}")

    __table_args__ = (Index("ix_backend_scrape_samples_backend_id", "backend_id", "at"),)


class UsageDaily(Base):
    """Requests and tokens per consumer, model and UTC day, summed over every gateway
    (collected from their counters by the controller). No foreign key: usage outlives
    a deleted consumer, and a gateway may report one the database no longer has."""
    __tablename__ = "usage_daily"

    consumer_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model: Mapped[str] = mapped_column(String(128), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True, index=True)
    requests: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    total_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # audio and image work (lua/sluice/media_usage.lua): milliseconds of audio
    # transcribed or translated, characters of text spoken, images made
    audio_ms: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    input_chars: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    images: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # realtime sessions' length (each rounded up to a whole second)
    session_seconds: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class UsageCursor(Base):
    """The counters last collected from one gateway, for the boot (nginx start) they
    belong to; updated in the transaction that adds their differences to usage_daily."""
    __tablename__ = "usage_cursors"

    gateway_id: Mapped[int] = mapped_column(
        ForeignKey("gateways.id", ondelete="CASCADE"), primary_key=True)
    boot: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[float] = mapped_column(Float)
    # "<YYYYMMDD>|<consumer id>|<model>" -> [requests, prompt, completion, total,
    # audio ms, characters, images, session seconds]
    counters: Mapped[dict] = mapped_column(JSONB, default=dict, server_default="{}")
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now())


class ControllerRecord(Base):
    """A `sluice controller` process as it last reported itself, each tick
    (control_plane/controller/leader.py). Which one is active is decided by the
    PostgreSQL advisory lock, not by this table: `active_since` says since when the
    holder holds it; the API checks the lock itself."""
    __tablename__ = "controllers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)   # host:pid:random
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    active_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
