"""Settings from the environment, parsed once into a frozen dataclass.

An optional `SLUICE_CONFIG` file of `KEY=VALUE` lines overlays the environment, so a
long-running process (the controller) can re-read it on SIGHUP without a restart.
Which variables are read and how each is parsed: settings_variables.py; what each one
means, for people: settings_descriptions.py.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from control_plane.settings_variables import _SECRET_VARIABLES, _VARIABLES, _Reason, _str


class SettingsError(ValueError):
    """A variable is missing or malformed; the message names the variable."""


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    admin_token: str | None = None
    gateway_token: str | None = None
    gateways: tuple[str, ...] = ()
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    gateway_port: int = 8000
    internal_port: int = 8001
    # `sluice gateway` / `sluice up`: where nginx listens, and how much of each request
    # body its access log keeps (PII-masked; 0 = none)
    gateway_host: str = "0.0.0.0"
    internal_host: str = "127.0.0.1"
    # The public HTTPS listener (HTTP/2 by ALPN): on when a certificate is named. The
    # certificate file is PEM, the server's first, then any intermediates (a chain);
    # the key file PEM too. `gateway_plain` false turns the plain HTTP listener off.
    tls_cert: str | None = None
    tls_key: str | None = None
    gateway_tls_port: int = 8443
    gateway_plain: bool = True
    log_excerpts: int = 0
    # cluster mode: limits and quotas shared by every gateway through one Redis;
    # what a gateway does while Redis fails (see docs/contracts.md, "Cluster mode")
    redis_url: str | None = None
    redis_failure: str = "open"
    controller_interval: float = 0.5
    push_timeout: float = 5.0
    config_file: str | None = None
    secret_key: str | None = None
    cookie_secure: bool = False
    # log shipping (control_plane/controller/ship_loop.py): gateways' access logs on this host
    access_logs: tuple[Any, ...] = ()
    ship_interval: float = 1.0
    # OTLP/HTTP endpoint the shipper exports one span per request to (clients/tracing.py)
    otlp_endpoint: str | None = None
    log_retention_days: float = 30.0
    controller_metrics_port: int | None = None
    controller_metrics_host: str = "127.0.0.1"
    model_slas: tuple[tuple[str, float], ...] = ()   # (model name, ms)
    # scaling signals (services/scaling.py)
    scale_window: float = 60.0
    scale_down_rpm: float = 10.0
    scale_down_gpu: float = 0.15
    scale_up_rps: float = 50.0
    scale_up_p99_ms: float = 2000.0
    scaling_webhook: str | None = None

    # Scheduling (issue 5): agents' token, telemetry staleness, the weight loop.
    agent_token: str | None = None
    telemetry_stale_after: float = 15.0
    weights_interval: float = 1.0
    weight_coefficients: tuple[float, float, float] = (0.6, 0.3, 0.1)
    # Usage (issue 3): seconds between collections of the gateways' usage counters.
    usage_interval: float = 1.0
    # Active health checks of the backends (control_plane/controller/health_loop.py).
    health_interval: float = 2.0
    health_timeout: float = 1.0

    # Circuit breaker of every backend, pushed in the snapshot's "breaker" section:
    # open when more than `error_rate` of at least `min_requests` requests failed
    # within `window_s`; after `cooldown_s`, `probes` requests test it (half-open).
    breaker_window_s: float = 60.0
    breaker_error_rate: float = 0.3
    breaker_min_requests: int = 20
    breaker_cooldown_s: float = 30.0
    breaker_probes: int = 1

    # `sluice up` restarts a child that died after `restart_backoff` seconds, doubling
    # with each death in a row up to `restart_backoff_max`; a child that stayed up
    # `restart_reset_after` seconds starts over at `restart_backoff`.
    restart_backoff: float = 1.0
    restart_backoff_max: float = 30.0
    restart_reset_after: float = 30.0
    # The admin API's connections: how long to wait for PostgreSQL to accept one
    # before answering 503 database_unavailable (and /readyz 503); whole seconds,
    # libpq's minimum is 2.
    db_connect_timeout: int = 3
    # Fleet membership (control_plane/runtime/membership.py, services/membership.py):
    # `sluice gateway` registers at `control_plane_url` (the admin API's base URL) as
    # `gateway_name`, reachable at `advertise_url`, and heartbeats each
    # `heartbeat_interval`; a member silent for `gateway_ttl` is stale (not pushed to),
    # for `gateway_gone_after` (default 10 x TTL) gone. Rows are kept.
    control_plane_url: str | None = None
    gateway_name: str | None = None
    advertise_url: str | None = None
    heartbeat_interval: float = 5.0
    gateway_ttl: float = 15.0
    gateway_gone_after: float | None = None
    # Optional TLS on the gateway's internal listener (PEM files), and the CA the
    # control plane's GatewayClient verifies https:// internal URLs against.
    internal_tls_cert: str | None = None
    internal_tls_key: str | None = None
    internal_ca: str | None = None

    # Admin UI sign-in: this many wrong passwords in a row lock the account for
    # `admin_lockout_s` seconds (a correct password resets the count).
    admin_login_attempts: int = 5
    admin_lockout_s: float = 300.0

    # Async jobs and the Batch API (docs/contracts.md, "Async jobs"): the broker
    # (None: `sluice up` starts a private one), where gateways hand async requests to
    # (None: the admin API's own host and port), the gateway workers send jobs through,
    # how long a job may run before another worker may take it over (its lease, also
    # the worker's timeout for the gateway's answer), how long a saturated model's job
    # keeps waiting before it fails, how often workers sweep for jobs a broker lost.
    amqp_url: str | None = None
    jobs_url: str | None = None
    worker_gateway_url: str | None = None
    job_lease_s: float = 660.0
    job_wait_max_s: float = 3600.0
    job_sweep_interval: float = 2.0
    # Webhooks: retried with exponential backoff and jitter for this long, then failed;
    # callback URLs to loopback, link-local and private addresses only when allowed.
    webhook_retry_for_s: float = 3600.0
    webhook_allow_private: bool = False

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

    def scaling_thresholds(self) -> Any:
        from control_plane.services.scaling import Thresholds

        return Thresholds(window_seconds=self.scale_window,
                          down_requests_per_minute=self.scale_down_rpm,
                          down_gpu_utilization=self.scale_down_gpu,
                          up_requests_per_second=self.scale_up_rps,
                          up_p99_ms=self.scale_up_p99_ms)

    @property
    def gone_after(self) -> float:
        return self.gateway_gone_after or 10 * self.gateway_ttl

    def require_database_url(self) -> str:
        if not self.database_url:
            raise SettingsError("DATABASE_URL is required")
        return self.database_url


def read_config_file(path: str) -> dict[str, str]:
    """Parse `KEY=VALUE` lines; blank lines and `#` comments are skipped."""
    values: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise SettingsError(f"SLUICE_CONFIG: cannot read {path}: {exc.strerror}") from exc
    for lineno, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SettingsError(f"SLUICE_CONFIG: {path}:{lineno}: expected KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key] = value
    return values


def load_settings(environ: Mapping[str, str] = os.environ) -> Settings:
    """Build Settings from `environ`, overlaid by the file named in SLUICE_CONFIG."""
    merged = dict(environ)
    config_file = _str(merged.get("SLUICE_CONFIG", ""))
    if config_file:
        merged.update(read_config_file(config_file))
    kwargs: dict[str, Any] = {"config_file": config_file}
    for name, (field, parse) in _VARIABLES.items():
        raw = merged.get(name)
        if raw is None:
            continue
        try:
            kwargs[field] = parse(raw)
        except ValueError as exc:
            if name in _SECRET_VARIABLES:
                reason = str(exc) if isinstance(exc, _Reason) else "is not valid"
                raise SettingsError(f"{name}=<redacted>: {reason}") from None
            # int()/float() messages are Python jargon; say what we expected instead
            reason = str(exc)
            if reason.startswith(("invalid literal", "could not convert")):
                reason = "expected a number"
            raise SettingsError(f"{name}={raw!r}: {reason}") from None
    if bool(kwargs.get("tls_cert")) != bool(kwargs.get("tls_key")):
        raise SettingsError("SLUICE_TLS_CERT and SLUICE_TLS_KEY: set both (the certificate "
                            "chain and its key) or neither")
    if not kwargs.get("gateway_plain", True) and not kwargs.get("tls_cert"):
        raise SettingsError("SLUICE_GATEWAY_PLAIN=off needs SLUICE_TLS_CERT and "
                            "SLUICE_TLS_KEY: the gateway would have no public listener")
    return Settings(**kwargs)
