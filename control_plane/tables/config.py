"""Tables of what operators configure: models, backends, routes, consumers, plans, keys,
JWT issuers, content policies, gateways, admin users and the config version (what the
snapshot is built from). Changed only through Alembic."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import (BigInteger, Boolean, CheckConstraint, DateTime, Float, ForeignKey,
                        Integer, String, Text, UniqueConstraint, func)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column, relationship

from control_plane.tables.base import Base, Timestamps

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"
# openai_realtime: OpenAI's Realtime API over a WebSocket (GET /v1/realtime only)
PROTOCOLS = ("openai", "predict", "kserve_v2", "tfserving", "vendor", "openai_responses",
             "gemini", "anthropic", "openai_realtime")
METRICS_FORMATS = ("vllm", "triton", "dcgm")   # Prometheus text a backend may be scraped for
# The audio and image work a model may do (lua/sluice/media.lua): the endpoints
# /v1/audio/transcriptions, /translations, /speech, /v1/images/* refuse other models.
MEDIA_TASKS = ("transcription", "translation", "speech", "image")
# A plan's daily caps on that work (Plan columns below; lua/sluice/media_caps.lua).
PLAN_CAPS = ("max_audio_seconds_per_day", "max_speech_chars_per_day", "max_images_per_day")
PRIORITIES = ("critical", "standard", "best_effort")   # admission classes, highest first
# How long a request of each class waits in the gateway for a slot of a saturated pool
# when its plan sets no queue_timeout_ms (best-effort: refused at once).
QUEUE_TIMEOUT_MS = {"critical": 10_000, "standard": 2_000, "best_effort": 0}
MAX_QUEUE_TIMEOUT_MS = 600_000
MAX_WEIGHT = 1000

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
    # Personal and health data by class, both directions: {"<class>": "mask" | "block"
    # | "log", "*": the rest} (services/phi_classes.py; lua/sluice/phi.lua); NULL: none.
    phi_policy: Mapped[dict | None] = mapped_column(JSONB, nullable=True)
    # The most tokens one answer may ask for (max_tokens, max_completion_tokens): the
    # gateway refuses more with 400 (lua/sluice/strict.lua); NULL: its default bound.
    max_output_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Audio and image work it does (MEDIA_TASKS; NULL: none), and the largest request
    # body it takes (NULL: 25 MiB on the audio and image endpoints, the gateway's
    # body limit elsewhere): past it, 413 (lua/sluice/media.lua).
    media_tasks: Mapped[list | None] = mapped_column(JSONB, nullable=True)
    max_request_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
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
                      CheckConstraint("fallback_model <> name", name="fallback_not_self"),
                      CheckConstraint("max_output_tokens > 0", name="max_output_tokens_positive"),
                      CheckConstraint("max_request_bytes > 0", name="max_request_bytes_positive"))


class ModelType(Timestamps, Base):
    """Brief 000's envelope names a kind of model ("nlp/sentiment"), not a model: this
    maps each such type to the model or route that serves it (by name, checked when
    written; the snapshot leaves out a type whose target is gone)."""
    __tablename__ = "model_types"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_type: Mapped[str] = mapped_column(String(128), unique=True)
    target: Mapped[str] = mapped_column(String(128))


class Mapping(Timestamps, Base):
    """How a vendor's API is spoken, as data: where to POST, the body template and
    where the answer and errors are (JSON pointers). See docs/contracts.md."""
    __tablename__ = "mappings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    path: Mapped[str] = mapped_column(String(1024))
    request: Mapped[dict] = mapped_column(JSONB)
    response: Mapped[dict] = mapped_column(JSONB)
    # Audio and images: how an upload travels to the vendor (upload, field,
    # content_type, query, headers, defaults; lua/sluice/media_mapping.lua); NULL: none.
    transport: Mapped[dict | None] = mapped_column(JSONB, nullable=True)


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
    # How a hosted vendor wants its requests (services/presets.py fills them from a
    # preset): the header auth_header goes in (NULL: Authorization), other headers
    # sent as they are, the gateway's backend paths mapped to the vendor's, and a
    # query string sent with every request. `preset` names the preset used, if any.
    preset: Mapped[str | None] = mapped_column(String(32), nullable=True)
    auth_header_name: Mapped[str | None] = mapped_column(String(64), nullable=True)
    headers: Mapped[dict | None] = mapped_column(JSONB, nullable=True)
    paths: Mapped[dict | None] = mapped_column(JSONB, nullable=True)
    query: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    # https:// backends only (services check). Verify the backend's certificate
    # against tls_ca (PEM; NULL: the system store) under tls_server_name (NULL: the
    # URL's host, also sent as SNI). Off only when an operator says so.
    tls_verify: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    tls_ca: Mapped[str | None] = mapped_column(Text, nullable=True)
    tls_server_name: Mapped[str | None] = mapped_column(String(253), nullable=True)
    # mTLS: the certificate (chain) and key the gateway presents. Secrets like
    # auth_header: write-only in the admin API, redacted in the audit trail and in
    # the snapshot the admin API shows; the gateway gets them only in its snapshot.
    tls_client_cert: Mapped[str | None] = mapped_column(Text, nullable=True)
    tls_client_key: Mapped[str | None] = mapped_column(Text, nullable=True)
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
        CheckConstraint("(tls_client_cert IS NULL) = (tls_client_key IS NULL)",
                        name="tls_client_pair"),
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
    # Overrides every model's phi_policy for this consumer's requests; NULL: the model's.
    phi_policy: Mapped[dict | None] = mapped_column(JSONB, nullable=True)
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
    rate_per_ip: Mapped[float | None] = mapped_column(Float)   # per client address; NULL: none
    burst: Mapped[int | None] = mapped_column(Integer)   # NULL: one second's worth
    max_concurrent: Mapped[int | None] = mapped_column(Integer)
    daily_requests: Mapped[int | None] = mapped_column(BigInteger)
    monthly_requests: Mapped[int | None] = mapped_column(BigInteger)
    monthly_tokens: Mapped[int | None] = mapped_column(BigInteger)
    # audio and image work per UTC day (lua/sluice/media_caps.lua); NULL: no cap
    max_audio_seconds_per_day: Mapped[int | None] = mapped_column(BigInteger)
    max_speech_chars_per_day: Mapped[int | None] = mapped_column(BigInteger)
    max_images_per_day: Mapped[int | None] = mapped_column(BigInteger)
    model_overrides: Mapped[dict] = mapped_column(JSONB, default=dict, server_default="{}")
    # Admission class of its consumers' requests when a pool is saturated, and
    # whether a caller may lower it per request (X-Sluice-Priority).
    priority: Mapped[str] = mapped_column(String(16), default="standard",
                                          server_default="standard")
    priority_header: Mapped[bool] = mapped_column(Boolean, default=False,
                                                  server_default="false")
    # How long its requests wait for a slot of a saturated pool; NULL: the class's
    # default (QUEUE_TIMEOUT_MS), 0: refused at once.
    queue_timeout_ms: Mapped[int | None] = mapped_column(Integer)
    # A best-effort request refused for saturation becomes an async job (202) instead.
    buffer_at_peak: Mapped[bool] = mapped_column(Boolean, default=False,
                                                 server_default="false")
    # Realtime (WebSocket) sessions: how many a consumer holds open at once (per
    # gateway) and the longest one may last, in seconds; NULL: no cap.
    realtime_sessions: Mapped[int | None] = mapped_column(Integer)
    realtime_session_s: Mapped[int | None] = mapped_column(Integer)

    def queue_timeout(self) -> int:
        """The wait bound the gateway applies (ms): the plan's, else its class's."""
        if self.queue_timeout_ms is not None:
            return self.queue_timeout_ms
        return QUEUE_TIMEOUT_MS.get(self.priority, 0)

    __table_args__ = (CheckConstraint("rate_per_second > 0", name="rate_positive"),
                      CheckConstraint("priority IN (" + ", ".join(f"'{p}'" for p in PRIORITIES)
                                      + ")", name="priority_known"),
                      CheckConstraint(f"queue_timeout_ms BETWEEN 0 AND {MAX_QUEUE_TIMEOUT_MS}",
                                      name="queue_timeout_range"),
                      CheckConstraint("realtime_sessions > 0", name="realtime_sessions_positive"),
                      CheckConstraint("rate_per_ip > 0", name="rate_per_ip_positive"),
                      CheckConstraint("realtime_session_s > 0",
                                      name="realtime_session_s_positive"))


class JwtIssuer(Timestamps, Base):
    """Public keys that sign callers' JWTs, with the checks that go with them.

    `keys` is a list of {"kid": str | None, "alg": "RS256" | "ES256", "pem": str},
    parsed from a PEM or a JWKS by the admin API, or fetched from `jwks_uri` by the
    controller (controller/jwks_loop.py); a fetched key that left the set stays in
    `retired_keys` (same shape plus `until`, Unix s) for its grace period. The claim
    `consumer_claim` (default `sub`) names the consumer; other claims become
    per-request attributes."""
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
    jwks_uri: Mapped[str | None] = mapped_column(String(2048))
    retired_keys: Mapped[list] = mapped_column(JSONB, default=list, server_default="[]")
    jwks_fetched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    jwks_last_error: Mapped[str | None] = mapped_column(Text)


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
    """A gateway the controller pushes to: listed by an operator (SLUICE_GATEWAYS or the
    API: `registered` false, always pushed to) or a member that registered itself and
    heartbeats (services/membership.py: live, stale or gone by `last_seen_at`). Rows of
    members that left are kept, with their history."""
    __tablename__ = "gateways"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # Not unique: a member that left keeps its row while a new one may reuse its address.
    internal_url: Mapped[str] = mapped_column(String(2048), index=True)
    acked_version: Mapped[int | None] = mapped_column(BigInteger)
    last_push_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    registered: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    boot_id: Mapped[str | None] = mapped_column(String(64))
    sluice_version: Mapped[str | None] = mapped_column(String(64))
    last_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # set when another member took over its address, or it said it was leaving
    left_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


ADMIN_ROLES = ("admin", "viewer")


class AdminUser(Timestamps, Base):
    """A person who may sign in to the admin UI, or a service account (no password:
    it acts only through its personal API tokens); `viewer`s only read."""
    __tablename__ = "admin_users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(256))  # werkzeug scrypt
    role: Mapped[str] = mapped_column(String(16))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    last_login_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Wrong passwords in a row, and the end of the lock they caused (sign-in throttling).
    failed_logins: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    locked_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The TOTP second factor (RFC 6238): the base32 secret, in force once confirmed by a
    # first code; the last time step accepted, so a code is never accepted twice.
    totp_secret: Mapped[str | None] = mapped_column(String(64))
    totp_confirmed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    totp_last_step: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (CheckConstraint("role IN ('admin', 'viewer')", name="role_known"),)


class ConfigState(Base):
    """One row (id=1): the config version every write to a snapshot resource bumps."""
    __tablename__ = "config_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now())

    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)
