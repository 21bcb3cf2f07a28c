"""Every setting, declared once: `Settings`' fields (variable, parser, default, meaning;
the async jobs' and webhooks' in control_plane.settings.jobs, the per-IP limit's in
control_plane.settings.ip_limits), and what is derived from them for the docs (VARIABLES, DESCRIPTIONS), with the
variables one process reads itself (OTHER_VARIABLES). See control_plane.settings."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from control_plane.settings import parsers
from control_plane.settings.ip_limits import IpLimitSettings
from control_plane.settings.jobs import JobSettings
from control_plane.settings.parsers import SettingsError
from control_plane.settings.setting import setting


@dataclass(frozen=True)
class Settings(JobSettings, IpLimitSettings):
    database_url: str | None = setting(
        "DATABASE_URL", parsers.database_url, None,
        "PostgreSQL URL",
        default_words="private cluster under `var/pg` (`sluice up` only)", secret=True)
    admin_token: str | None = setting(
        "SLUICE_ADMIN_TOKEN", parsers.text, None,
        "bearer token of the admin API",
        default_words="generated into `var/secrets.json` by `sluice up`", secret=True)
    gateway_token: str | None = setting(
        "SLUICE_GATEWAY_TOKEN", parsers.text, None,
        "token of the gateways' internal listeners (and of gateway "
        "registration)",
        default_words="generated likewise", secret=True)
    gateways: tuple[str, ...] = setting(
        "SLUICE_GATEWAYS", parsers.url_list, (),
        "comma-separated internal URLs the controller pushes to, beside "
        "the gateways that register themselves (`sluice up`'s does)")
    api_host: str = setting(
        "SLUICE_API_HOST", parsers.text, "127.0.0.1",
        "address the admin API listens on")
    api_port: int = setting(
        "SLUICE_API_PORT", parsers.port, 8080,
        "port of the admin API and UI")
    gateway_port: int = setting(
        "SLUICE_GATEWAY_PORT", parsers.port, 8000,
        "the gateway's public plain-HTTP port")
    internal_port: int = setting(
        "SLUICE_INTERNAL_PORT", parsers.port, 8001,
        "the gateway's internal listener (pushes, `/metrics`, stats)")
    # `sluice gateway` / `sluice up`: where nginx listens, and how much of each request
    # body its access log keeps (PII-masked; 0 = none)
    gateway_host: str = setting(
        "SLUICE_GATEWAY_HOST", parsers.text, "0.0.0.0",
        "address `sluice gateway` serves callers on",
        default_words="0.0.0.0 (`sluice up`: 127.0.0.1)")
    internal_host: str = setting(
        "SLUICE_INTERNAL_HOST", parsers.text, "127.0.0.1",
        "address of the internal listener: loopback or a private "
        "interface only")
    # The public HTTPS listener (HTTP/2 by ALPN): on when a certificate is named. The
    # certificate file is PEM, the server's first, then any intermediates (a chain);
    # the key file PEM too. `gateway_plain` false turns the plain HTTP listener off.
    tls_cert: str | None = setting(
        "SLUICE_TLS_CERT", parsers.text, None,
        "PEM certificate chain (server's first) of the gateway's HTTPS "
        "listener; set with `SLUICE_TLS_KEY` to turn HTTPS on",
        default_words="none (`sluice up`: its demo certificate under `var/tls`)")
    tls_key: str | None = setting(
        "SLUICE_TLS_KEY", parsers.text, None,
        "PEM key of the gateway's HTTPS listener",
        default_words="none (`sluice up`: its demo key)")
    gateway_tls_port: int = setting(
        "SLUICE_GATEWAY_TLS_PORT", parsers.port, 8443,
        "the gateway's HTTPS port (HTTP/2 by ALPN)")
    gateway_plain: bool = setting(
        "SLUICE_GATEWAY_PLAIN", parsers.flag, True,
        "`off`: no plain HTTP listener, HTTPS only (needs "
        "`SLUICE_TLS_CERT`)")
    log_excerpts: int = setting(
        "SLUICE_LOG_EXCERPTS", parsers.chars, 0,
        "characters of each request body kept in the access log, with "
        "e-mail addresses, phone, national ID and card numbers masked; "
        "0 keeps none")
    cors_origins: tuple[str, ...] = setting(
        "SLUICE_CORS_ORIGINS", parsers.cors_origins, (),
        "`*` or `https://app.example.com,…`: browser pages of these origins may call "
        "the gateway (CORS: preflights answered before any key check)",
        default_words="none (no CORS headers: only same-origin pages)")
    # cluster mode: limits and quotas shared by every gateway through one Redis;
    # what a gateway does while Redis fails (see docs/contracts.md, "Cluster mode")
    redis_url: str | None = setting(
        "SLUICE_REDIS_URL", parsers.redis_url, None,
        "`redis://[[user]:password@]host[:port][/db]`: cluster mode, rate "
        "limits and quotas shared by every gateway using it",
        default_words="none (limits per gateway)", secret=True)
    redis_failure: str = setting(
        "SLUICE_REDIS_FAILURE", parsers.redis_failure, "open",
        "while Redis fails: `open` = each gateway's own counters "
        "decide, `closed` = limited requests get 503")
    controller_interval: float = setting(
        "SLUICE_CONTROLLER_INTERVAL", parsers.positive_float, 0.5,
        "seconds between the controller's checks for a new "
        "config version")
    push_timeout: float = setting(
        "SLUICE_PUSH_TIMEOUT", parsers.positive_float, 5.0,
        "seconds one push to a gateway may take")
    # the file named by SLUICE_CONFIG (below: read before the others, which it overlays)
    config_file: str | None = None
    secret_key: str | None = setting(
        "SLUICE_SECRET_KEY", parsers.text, None,
        "signs the admin UI's session cookies",
        default_words="generated by `sluice up` (otherwise derived from the admin "
        "token)", secret=True)
    cookie_secure: bool = setting(
        "SLUICE_COOKIE_SECURE", parsers.flag, False,
        "mark the session cookie `Secure`; set it when the UI is "
        "served over HTTPS")
    # log shipping (control_plane/controller/ship_loop.py): gateways' access logs on this host
    access_logs: tuple[Any, ...] = setting(
        "SLUICE_ACCESS_LOGS", parsers.parse_sources, (),
        "`name=/path/to/access.log,…`: gateway access logs on this host "
        "the controller or `sluice shipper` ships to PostgreSQL",
        default_words="none (`sluice up`: its gateway's)")
    ship_interval: float = setting(
        "SLUICE_SHIP_INTERVAL", parsers.positive_float, 1.0,
        "seconds between log shipping passes when idle")
    # OTLP/HTTP endpoint the shipper exports one span per request to (clients/tracing.py)
    otlp_endpoint: str | None = setting(
        "SLUICE_OTLP_ENDPOINT", parsers.optional_url, None,
        "OTLP/HTTP collector, e.g. `http://otel:4318` (`/v1/traces` is "
        "added): the log shipper exports one span per request",
        default_words="none (no export)")
    log_retention_days: float = setting(
        "SLUICE_LOG_RETENTION_DAYS", parsers.positive_float, 30.0,
        "inference log rows older than this many days are deleted")
    controller_metrics_port: int | None = setting(
        "SLUICE_CONTROLLER_METRICS_PORT", parsers.port, None,
        "port of the controller's Prometheus metrics",
        default_words="off (`sluice up`: 8002)")
    controller_metrics_host: str = setting(
        "SLUICE_CONTROLLER_METRICS_HOST", parsers.text, "127.0.0.1",
        "address of the controller's metrics")
    model_slas: tuple[tuple[str, float], ...] = setting(
        "SLUICE_MODEL_SLA", parsers.slas, (),   # (model name, ms)
        "`model=milliseconds,…`: latency objectives, exported for the "
        "p99 alert")
    # scaling signals (services/scaling.py)
    scale_window: float = setting(
        "SLUICE_SCALE_WINDOW", parsers.positive_float, 60.0,
        "seconds of inference logs the scaling signals look at")
    scale_down_rpm: float = setting(
        "SLUICE_SCALE_DOWN_RPM", parsers.positive_float, 10.0,
        "`down` below this many requests per minute …")
    scale_down_gpu: float = setting(
        "SLUICE_SCALE_DOWN_GPU", parsers.positive_float, 0.15,
        "… and GPU utilisation below this fraction (never without "
        "telemetry)")
    scale_up_rps: float = setting(
        "SLUICE_SCALE_UP_RPS", parsers.positive_float, 50.0,
        "`up` at this many requests per second or more …")
    scale_up_p99_ms: float = setting(
        "SLUICE_SCALE_UP_P99_MS", parsers.positive_float, 2000.0,
        "… and a p99 latency of this many milliseconds or more")
    scaling_webhook: str | None = setting(
        "SLUICE_SCALING_WEBHOOK", parsers.webhook_url, None,
        "URL the controller POSTs changed scaling recommendations to", secret=True)

    # Scheduling (issue 5): agents' token, telemetry staleness, the weight loop.
    agent_token: str | None = setting(
        "SLUICE_AGENT_TOKEN", parsers.text, None,
        "token agents use for `POST /api/v1/telemetry` (API and "
        "`sluice agent`)",
        default_words="none (only the admin token is accepted)", secret=True)
    telemetry_stale_after: float = setting(
        "SLUICE_TELEMETRY_STALE_AFTER", parsers.positive_float, 15.0,
        "seconds without a report before a GPU is stale (it "
        "no longer steers traffic)")
    weights_interval: float = setting(
        "SLUICE_WEIGHTS_INTERVAL", parsers.positive_float, 1.0,
        "seconds between weight computations and pushes")
    weight_coefficients: tuple[float, float, float] = setting(
        "SLUICE_WEIGHT_COEFFICIENTS", parsers.coefficients, (0.6, 0.3, 0.1),
        "default memory, success, latency coefficients of the "
        "weight formula")
    # Usage (issue 3): seconds between collections of the gateways' usage counters.
    usage_interval: float = setting(
        "SLUICE_USAGE_INTERVAL", parsers.positive_float, 1.0,
        "seconds between collections of the gateways' usage counters "
        "(and pushes of the fleet's usage back)")
    # Active health checks of the backends (control_plane/controller/health_loop.py).
    health_interval: float = setting(
        "SLUICE_HEALTH_INTERVAL", parsers.positive_float, 2.0,
        "seconds between backend readiness probes")
    health_timeout: float = setting(
        "SLUICE_HEALTH_TIMEOUT", parsers.positive_float, 1.0,
        "seconds each readiness probe may take")

    # JWT issuers by jwks_uri (control_plane/controller/jwks_loop.py).
    jwks_interval: float = setting(
        "SLUICE_JWKS_INTERVAL", parsers.positive_float, 30.0,
        "seconds between fetches of each JWT issuer's `jwks_uri`")
    jwks_grace_s: float = setting(
        "SLUICE_JWKS_GRACE_S", parsers.positive_float, 600.0,
        "seconds a key that left an issuer's fetched JWKS keeps verifying")
    jwks_allow_http: bool = setting(
        "SLUICE_JWKS_ALLOW_HTTP", parsers.flag, False,
        "allow a `jwks_uri` over plain http:// (tests and labs)")

    # Circuit breaker of every backend, pushed in the snapshot's "breaker" section:
    # open when more than `error_rate` of at least `min_requests` requests failed
    # within `window_s`; after `cooldown_s`, `probes` requests test it (half-open).
    breaker_window_s: float = setting(
        "SLUICE_BREAKER_WINDOW_S", parsers.positive_float, 60.0,
        "circuit breaker: seconds of outcomes it judges")
    breaker_error_rate: float = setting(
        "SLUICE_BREAKER_ERROR_RATE", parsers.fraction, 0.3,
        "circuit breaker: opens above this share of failures …")
    breaker_min_requests: int = setting(
        "SLUICE_BREAKER_MIN_REQUESTS", parsers.count, 20,
        "… of at least this many requests in the window")
    breaker_cooldown_s: float = setting(
        "SLUICE_BREAKER_COOLDOWN_S", parsers.positive_float, 30.0,
        "circuit breaker: seconds open before probing")
    breaker_probes: int = setting(
        "SLUICE_BREAKER_PROBES", parsers.count, 1,
        "circuit breaker: requests let through half-open")

    # `sluice up` restarts a child that died after `restart_backoff` seconds, doubling
    # with each death in a row up to `restart_backoff_max`; a child that stayed up
    # `restart_reset_after` seconds starts over at `restart_backoff`.
    restart_backoff: float = setting(
        "SLUICE_RESTART_BACKOFF", parsers.positive_float, 1.0,
        "`sluice up`: seconds before restarting a dead child, "
        "doubling with each death in a row …")
    restart_backoff_max: float = setting(
        "SLUICE_RESTART_BACKOFF_MAX", parsers.positive_float, 30.0,
        "… up to this many seconds")
    restart_reset_after: float = setting(
        "SLUICE_RESTART_RESET_AFTER", parsers.positive_float, 30.0,
        "a child up this many seconds starts over at the first "
        "delay")
    # The admin API's connections: how long to wait for PostgreSQL to accept one
    # before answering 503 database_unavailable (and /readyz 503); whole seconds,
    # libpq's minimum is 2.
    db_connect_timeout: int = setting(
        "SLUICE_DB_CONNECT_TIMEOUT", parsers.count, 3,
        "whole seconds the admin API waits for a PostgreSQL "
        "connection before answering 503 (libpq's minimum is 2; a "
        "`connect_timeout` in `DATABASE_URL` wins)")
    # Fleet membership (control_plane/runtime/membership.py, services/membership.py):
    # `sluice gateway` registers at `control_plane_url` (the admin API's base URL) as
    # `gateway_name`, reachable at `advertise_url`, and heartbeats each
    # `heartbeat_interval`; a member silent for `gateway_ttl` is stale (not pushed to),
    # for `gateway_gone_after` (default 10 x TTL) gone. Rows are kept.
    control_plane_url: str | None = setting(
        "SLUICE_CONTROL_PLANE_URL", parsers.optional_url, None,
        "admin API base URL `sluice gateway` registers and "
        "heartbeats at, with the gateway token",
        default_words="none (no registration; `sluice up`: its admin API)")
    gateway_name: str | None = setting(
        "SLUICE_GATEWAY_NAME", parsers.gateway_name, None,
        "the name a gateway registers under (unique in the fleet)",
        default_words="the host name")
    advertise_url: str | None = setting(
        "SLUICE_GATEWAY_ADVERTISE_URL", parsers.optional_url, None,
        "internal URL the controller reaches this gateway at",
        default_words="the internal listener (this host's address when it "
        "listens on 0.0.0.0)")
    heartbeat_interval: float = setting(
        "SLUICE_HEARTBEAT_INTERVAL", parsers.positive_float, 5.0,
        "seconds between a gateway's heartbeats")
    gateway_ttl: float = setting(
        "SLUICE_GATEWAY_TTL", parsers.positive_float, 15.0,
        "seconds of silence after which a member is `stale` (no longer "
        "pushed to)")
    gateway_gone_after: float | None = setting(
        "SLUICE_GATEWAY_GONE_AFTER", parsers.positive_float, None,
        "seconds of silence after which a member is `gone` (its "
        "row is kept)",
        default_words="10 × `SLUICE_GATEWAY_TTL`")
    # Optional TLS on the gateway's internal listener (PEM files), and the CA the
    # control plane's GatewayClient verifies https:// internal URLs against.
    internal_tls_cert: str | None = setting(
        "SLUICE_INTERNAL_TLS_CERT", parsers.readable_file, None,
        "PEM file: TLS certificate of the gateway's internal "
        "listener",
        default_words="none (plain HTTP)")
    internal_tls_key: str | None = setting(
        "SLUICE_INTERNAL_TLS_KEY", parsers.readable_file, None,
        "PEM file: its key",
        default_words="none")
    internal_ca: str | None = setting(
        "SLUICE_INTERNAL_CA", parsers.readable_file, None,
        "PEM CA the control plane (and the gateway itself) verifies "
        "https:// internal listeners against",
        default_words="none (system store)")

    # Admin UI sign-in: this many wrong passwords in a row lock the account for
    # `admin_lockout_s` seconds (a correct password resets the count).
    admin_login_attempts: int = setting(
        "SLUICE_ADMIN_LOGIN_ATTEMPTS", parsers.count, 5,
        "wrong admin UI passwords in a row that lock the account")
    admin_lockout_s: float = setting(
        "SLUICE_ADMIN_LOCKOUT_S", parsers.positive_float, 300.0,
        "seconds a locked admin UI account stays locked")
    admin_token_enabled: bool = setting(
        "SLUICE_ADMIN_TOKEN_ENABLED", parsers.flag, True,
        "whether the shared SLUICE_ADMIN_TOKEN still opens the admin API (for "
        "`sluice up` and first setup; turn off once personal tokens exist)")
    admin_otp_required: bool = setting(
        "SLUICE_ADMIN_OTP_REQUIRED", parsers.flag, False,
        "dangerous admin changes need a fresh TOTP code (header X-Sluice-OTP)")

    def jobs_service_url(self) -> str:
        """Where gateways proxy async requests: SLUICE_JOBS_URL, else this admin API."""
        if self.jobs_url:
            return self.jobs_url
        host = "127.0.0.1" if self.api_host in ("0.0.0.0", "", "::") else self.api_host
        return f"http://{host}:{self.api_port}"

    def worker_gateway(self) -> str:
        """The gateway `sluice worker` sends jobs through."""
        return self.worker_gateway_url or f"http://127.0.0.1:{self.gateway_port}"

    def breaker(self) -> dict[str, float]:
        """The snapshot's "breaker" section (docs/contracts.md)."""
        return {"window_s": self.breaker_window_s, "error_threshold": self.breaker_error_rate,
                "min_requests": self.breaker_min_requests,
                "cooldown_s": self.breaker_cooldown_s, "probes": self.breaker_probes}

    @property
    def gone_after(self) -> float:
        return self.gateway_gone_after or 10 * self.gateway_ttl

    def require_database_url(self) -> str:
        if not self.database_url:
            raise SettingsError("DATABASE_URL is required")
        return self.database_url


# variable name -> its field of Settings (metadata: parse, meaning, default_words, secret)
# (Settings' own fields first, then the per-IP limit's, then the jobs': the reference's
# order)
_RANK = {f.name: rank for rank, base in enumerate((IpLimitSettings, JobSettings), 1)
         for f in dataclasses.fields(base)}
VARIABLES: dict[str, dataclasses.Field] = {
    f.metadata["variable"]: f
    for f in sorted(dataclasses.fields(Settings),
                    key=lambda f: _RANK.get(f.name, 0))
    if f.metadata}

# Read outside Settings, by one process each: variable -> (default in words, meaning).
OTHER_VARIABLES: dict[str, tuple[str, str]] = {
    "SLUICE_CONFIG": ("none", "a `KEY=VALUE` file overlaying the environment; the "
                      "controller reads it again on `SIGHUP`"),
    "SLUICE_VAR_DIR": ("`./var`", "where `sluice up` keeps data, logs, tokens and "
                       "`sluice-up.json`"),
    "SLUICE_LOG_LEVEL": ("`INFO`", "log level of the Python processes"),
    "SLUICE_CONTROL_PLANE": ("`http://127.0.0.1:8080`",
                             "admin API URL `sluice agent` reports to"),
    "SLUICE_ADMIN_PASSWORD": ("none (asked twice)",
                              "`sluice create-admin`: the new user's password"),
}

# every variable Sluice reads -> what it means
DESCRIPTIONS: dict[str, str] = {
    **{name: f.metadata["meaning"] for name, f in VARIABLES.items()},
    **{name: meaning for name, (_default, meaning) in OTHER_VARIABLES.items()}}
