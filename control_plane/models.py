"""Database schema (SQLAlchemy 2.0 declarative). Changed only through Alembic."""
from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import (BigInteger, Boolean, CheckConstraint, Date, DateTime, Float, ForeignKey,
                        Index, Integer, MetaData, String, Text, UniqueConstraint, func)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"
PROTOCOLS = ("openai", "predict", "kserve_v2", "tfserving", "vendor")
METRICS_FORMATS = ("vllm", "triton", "dcgm")   # Prometheus text a backend may be scraped for
PRIORITIES = ("critical", "standard", "best_effort")   # admission classes, highest first
MAX_WEIGHT = 1000

# Deterministic constraint names: the API maps a violated constraint back to a field.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Timestamps:
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now())


class Model(Timestamps, Base):
    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    timeout_ms: Mapped[int] = mapped_column(Integer, default=60000, server_default="60000")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    # Response cache: seconds an answer is reused (0: never cached), and whether
    # consumers share cached answers (False: each consumer sees only its own).
    cache_ttl_s: Mapped[int] = mapped_column(Integer, default=300, server_default="300")
    cache_shared: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    # Mask e-mail addresses, phone, national ID and card numbers in requests before
    # they reach this model's backends (lua/sluice/pii.lua).
    mask_pii: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    # Coefficients of the weight formula for this model's pools, e.g.
    # {"memory": 0.6, "success": 0.3, "latency": 0.1}; NULL: the controller's defaults.
    weight_coefficients: Mapped[dict | None] = mapped_column(JSONB, nullable=True)
    # Affinity: only backends on GPUs of this class ("A100") serve it; NULL: any.
    gpu_class: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The model that answers when this one's backend times out (by name: a rename
    # follows; deleting a model still named here is refused).
    fallback_model: Mapped[str | None] = mapped_column(
        String(128), ForeignKey("models.name", onupdate="CASCADE", ondelete="RESTRICT",
                                name="fk_models_fallback_model_models"), nullable=True)

    backends: Mapped[list[Backend]] = relationship(
        back_populates="model", passive_deletes="all", order_by="Backend.id")

    __table_args__ = (CheckConstraint("timeout_ms > 0", name="timeout_positive"),
                      CheckConstraint("cache_ttl_s >= 0", name="cache_ttl_non_negative"),
                      CheckConstraint("fallback_model <> name", name="fallback_not_self"))


class Mapping(Timestamps, Base):
    """How a vendor's API is spoken, as data: where to POST, the body template and
    where the answer and errors are (JSON pointers). See docs/contracts.md."""
    __tablename__ = "mappings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    path: Mapped[str] = mapped_column(String(1024))
    request: Mapped[dict] = mapped_column(JSONB)
    response: Mapped[dict] = mapped_column(JSONB)


class Backend(Timestamps, Base):
    __tablename__ = "backends"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # RESTRICT: deleting a model that still serves traffic must be a deliberate act.
    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="RESTRICT"), index=True)
    url: Mapped[str] = mapped_column(String(2048))
    protocol: Mapped[str] = mapped_column(String(32))
    # Only vendor backends have (and need) a mapping.
    mapping_id: Mapped[int | None] = mapped_column(
        ForeignKey("mappings.id", ondelete="RESTRICT"), index=True, nullable=True)
    weight: Mapped[int] = mapped_column(Integer, default=100, server_default="100")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    # The Authorization value the gateway sends to this backend (the caller's never
    # reaches it). A secret: write-only in the admin API.
    auth_header: Mapped[str | None] = mapped_column(Text)
    # Set while drained (weight 0): the weight to restore. Not part of the snapshot.
    drained_weight: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Declared GPU class, for hosts without an agent; overrides what agents report.
    gpu_class: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Prometheus endpoint the controller scrapes for this backend's load (optional).
    metrics_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    metrics_format: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # Requests in flight it takes; its pool sheds lower priorities as it fills.
    # NULL: unlimited (the pool never sheds).
    max_in_flight: Mapped[int | None] = mapped_column(Integer, nullable=True)

    model: Mapped[Model] = relationship(back_populates="backends")
    mapping: Mapped[Mapping | None] = relationship()

    __table_args__ = (
        CheckConstraint(f"weight >= 0 AND weight <= {MAX_WEIGHT}", name="weight_range"),
        CheckConstraint("protocol IN (" + ", ".join(f"'{p}'" for p in PROTOCOLS) + ")",
                        name="protocol_known"),
        CheckConstraint("(protocol = 'vendor') = (mapping_id IS NOT NULL)",
                        name="vendor_mapping"),
        CheckConstraint("(metrics_url IS NULL) = (metrics_format IS NULL)",
                        name="metrics_pair"),
        CheckConstraint("metrics_format IN (" + ", ".join(f"'{f}'" for f in METRICS_FORMATS)
                        + ")", name="metrics_format_known"),
        CheckConstraint("max_in_flight > 0", name="max_in_flight_positive"),
    )


class Route(Timestamps, Base):
    """A public model name split between versions (target models): canary, A/B,
    conditions on consumer attributes. The name may also be a model's name."""
    __tablename__ = "routes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # True: a caller keeps its version while the percents hold (hash of the caller).
    sticky: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")

    versions: Mapped[list[RouteVersion]] = relationship(
        back_populates="route", cascade="all, delete-orphan", passive_deletes=True,
        order_by="RouteVersion.position")


class RouteVersion(Base):
    __tablename__ = "route_versions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    route_id: Mapped[int] = mapped_column(ForeignKey("routes.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    # RESTRICT: a model a route sends traffic to is not deleted by accident.
    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="RESTRICT"), index=True)
    percent: Mapped[int] = mapped_column(Integer)
    # [] or [{"attr": "user_type", "op": "eq"|"ne"|"in", "value": ...}], all must hold
    conditions: Mapped[list] = mapped_column(JSONB, default=list, server_default="[]")

    route: Mapped[Route] = relationship(back_populates="versions")
    model: Mapped[Model] = relationship()

    __table_args__ = (
        UniqueConstraint("route_id", "position", name="uq_route_versions_route_id"),
        CheckConstraint("percent >= 0 AND percent <= 100", name="percent_range"),
    )


class BackendHealth(Base):
    """A backend's readiness as the controller's health checks last saw it; written
    when the state changes (control_plane/health.py)."""
    __tablename__ = "backend_health"

    backend_id: Mapped[int] = mapped_column(
        ForeignKey("backends.id", ondelete="CASCADE"), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))   # ready, loading, unreachable
    detail: Mapped[str] = mapped_column(String(256), default="", server_default="")
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Consumer(Timestamps, Base):
    __tablename__ = "consumers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # NULL: every model; a list: only those model names.
    allowed_models: Mapped[list[str] | None] = mapped_column(JSONB, nullable=True)
    # Free-form facts about the caller (e.g. {"user_type": "vip"}) that routing
    # conditions can test; JWT claims are merged over them per request.
    attributes: Mapped[dict] = mapped_column(JSONB, default=dict, server_default="{}")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    # NULL: no limits at all (trusted internal callers).
    plan_id: Mapped[int | None] = mapped_column(
        ForeignKey("plans.id", ondelete="RESTRICT"), index=True)

    keys: Mapped[list[ApiKey]] = relationship(
        back_populates="consumer", passive_deletes=True, order_by="ApiKey.id")


class Plan(Timestamps, Base):
    """What a consumer may do: a token bucket (rate, burst), concurrent requests, and
    request and token quotas. NULL limits are unlimited. `model_overrides` maps a model
    name to any of the limit fields, replacing the plan's value for that model."""
    __tablename__ = "plans"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    rate_per_second: Mapped[float] = mapped_column(Float, default=100, server_default="100")
    burst: Mapped[int | None] = mapped_column(Integer)   # NULL: one second's worth
    max_concurrent: Mapped[int | None] = mapped_column(Integer)
    daily_requests: Mapped[int | None] = mapped_column(BigInteger)
    monthly_requests: Mapped[int | None] = mapped_column(BigInteger)
    monthly_tokens: Mapped[int | None] = mapped_column(BigInteger)
    model_overrides: Mapped[dict] = mapped_column(JSONB, default=dict, server_default="{}")
    # Admission class of its consumers' requests when a pool is saturated, and
    # whether a caller may lower it per request (X-Sluice-Priority).
    priority: Mapped[str] = mapped_column(String(16), default="standard",
                                          server_default="standard")
    priority_header: Mapped[bool] = mapped_column(Boolean, default=False,
                                                  server_default="false")

    __table_args__ = (CheckConstraint("rate_per_second > 0", name="rate_positive"),
                      CheckConstraint("priority IN (" + ", ".join(f"'{p}'" for p in PRIORITIES)
                                      + ")", name="priority_known"))


class JwtIssuer(Timestamps, Base):
    """Public keys that sign callers' JWTs, with the checks that go with them.

    `keys` is a list of {"kid": str | None, "alg": "RS256" | "ES256", "pem": str},
    parsed from a PEM or a JWKS by the admin API. The claim `consumer_claim` (default
    `sub`) names the consumer; other claims become per-request attributes."""
    __tablename__ = "jwt_issuers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    keys: Mapped[list] = mapped_column(JSONB)
    issuer: Mapped[str | None] = mapped_column(String(512))
    audience: Mapped[str | None] = mapped_column(String(512))
    consumer_claim: Mapped[str] = mapped_column(String(64), default="sub",
                                                server_default="sub")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ContentPolicy(Timestamps, Base):
    """Terms a request must not contain (case-insensitive substrings of any string in
    the request body), for one model by name or, with `model` NULL, for all."""
    __tablename__ = "content_policies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    model: Mapped[str | None] = mapped_column(String(128))
    terms: Mapped[list] = mapped_column(JSONB)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")


class ApiKey(Timestamps, Base):
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    consumer_id: Mapped[int] = mapped_column(
        ForeignKey("consumers.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128), default="", server_default="")
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex
    prefix: Mapped[str] = mapped_column(String(16))  # shown to operators, not secret
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    consumer: Mapped[Consumer] = relationship(back_populates="keys")


class Gateway(Timestamps, Base):
    __tablename__ = "gateways"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    internal_url: Mapped[str] = mapped_column(String(2048), unique=True)
    acked_version: Mapped[int | None] = mapped_column(BigInteger)
    last_push_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)


ADMIN_ROLES = ("admin", "viewer")


class AdminUser(Timestamps, Base):
    """A person who may sign in to the admin UI; `viewer`s only read."""
    __tablename__ = "admin_users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(256))  # werkzeug scrypt
    role: Mapped[str] = mapped_column(String(16))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    last_login_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Wrong passwords in a row, and the end of the lock they caused (sign-in throttling).
    failed_logins: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    locked_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (CheckConstraint("role IN ('admin', 'viewer')", name="role_known"),)


class ConfigState(Base):
    """One row (id=1): the config version every write to a snapshot resource bumps."""
    __tablename__ = "config_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now())

    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)


class InferenceLog(Base):
    """One request answered by a gateway, shipped from its JSON access log.

    `latency` and `upstream_latency` are milliseconds; `ts` is when the answer ended.
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
    """One admin change. Append-only: a trigger refuses UPDATE, DELETE and TRUNCATE."""
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

    __table_args__ = (
        CheckConstraint("action IN ('create', 'update', 'delete')", name="action_known"),
        Index("ix_audit_log_resource_resource_id", "resource", "resource_id"),
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


class UsageCursor(Base):
    """The counters last collected from one gateway, for the boot (nginx start) they
    belong to; updated in the transaction that adds their differences to usage_daily."""
    __tablename__ = "usage_cursors"

    gateway_id: Mapped[int] = mapped_column(
        ForeignKey("gateways.id", ondelete="CASCADE"), primary_key=True)
    boot: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[float] = mapped_column(Float)
    # "<YYYYMMDD>|<consumer id>|<model>" -> [requests, prompt, completion, total]
    counters: Mapped[dict] = mapped_column(JSONB, default=dict, server_default="{}")
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now())
