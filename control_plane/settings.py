"""Settings from the environment, parsed once into a frozen dataclass.

An optional `SLUICE_CONFIG` file of `KEY=VALUE` lines overlays the environment, so a
long-running process (the controller) can re-read it on SIGHUP without a restart.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit


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
    # log shipping (control_plane/shipper.py): gateways' access logs on this host
    access_logs: tuple[Any, ...] = ()
    ship_interval: float = 1.0
    # OTLP/HTTP endpoint the shipper exports one span per request to (tracing.py)
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


def _str(value: str) -> str | None:
    value = value.strip()
    return value or None


def _port(value: str) -> int:
    port = int(value)
    if not 1 <= port <= 65535:
        raise ValueError("must be a port number between 1 and 65535")
    return port


def _chars(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("must be a number of characters >= 0")
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if not number > 0 or number != number or number == float("inf"):
        raise ValueError("must be a positive number of seconds")
    return number


def _count(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError("must be a whole number >= 1")
    return number


def _fraction(value: str) -> float:
    number = float(value)
    if not 0 < number <= 1:
        raise ValueError("must be a fraction in (0, 1], e.g. 0.3")
    return number


def _coefficients(value: str) -> tuple[float, float, float]:
    parts = [p.strip() for p in value.split(",")]
    if len(parts) != 3:
        raise ValueError("must be three numbers: memory,success,latency (e.g. 0.6,0.3,0.1)")
    nums = tuple(float(p) for p in parts)
    if any(not 0 <= n <= 1 for n in nums) or sum(nums) <= 0:
        raise ValueError("each coefficient must be in [0, 1] and their sum positive")
    return nums  # type: ignore[return-value]


class _Reason(ValueError):
    """A problem in words we wrote, free of the value it judges (ValueErrors raised by
    Python itself, such as urlsplit's port errors, may quote part of the value)."""


def _port_of(parts) -> int | None:
    try:
        return parts.port
    except ValueError:
        raise _Reason("the port must be a number in 0..65535") from None


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL")
    parts.port  # raises ValueError on a bad port
    return value.rstrip("/")


def _webhook_url(value: str) -> str | None:
    """An http(s) URL that may carry a token: its errors never quote it."""
    value = value.strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _Reason("must be an http(s) URL")
    _port_of(parts)
    return value.rstrip("/")


def _url_list(value: str) -> tuple[str, ...]:
    return tuple(_http_url(item.strip()) for item in value.split(",") if item.strip())


def _bool(value: str) -> bool:
    value = value.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false")


@dataclass(frozen=True)
class RedisURL:
    host: str
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: str | None = None


def parse_redis_url(value: str) -> RedisURL:
    """`redis://[[user]:password@]host[:port][/db]`."""
    parts = urlsplit(value.strip())
    if parts.scheme != "redis" or not parts.hostname:
        raise _Reason("must be a URL such as redis://[:password@]host:6379/0")
    port = _port_of(parts) or 6379
    if parts.query or parts.fragment:
        raise _Reason("takes no query or fragment")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise _Reason("the database must be a number such as /0")
    return RedisURL(host=parts.hostname, port=port, db=int(path or 0),
                    username=unquote(parts.username) if parts.username else None,
                    password=unquote(parts.password) if parts.password else None)


def _redis_url(value: str) -> str | None:
    value = value.strip()
    if value:
        parse_redis_url(value)
    return value or None


def _redis_failure(value: str) -> str:
    value = value.strip().lower() or "open"
    if value not in ("open", "closed"):
        raise ValueError("must be open or closed")
    return value


def _slas(value: str) -> tuple[tuple[str, float], ...]:
    """`chat-demo=1500,sentiment-demo=200`: milliseconds per model name."""
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, ms = item.partition("=")
        try:
            number = float(ms)
        except ValueError:
            number = float("nan")
        if not sep or not name.strip() or not number > 0 or number == float("inf"):
            raise ValueError(f"{item!r} is not MODEL=MILLISECONDS")
        out.append((name.strip(), number))
    return tuple(out)


def _access_logs(value: str) -> tuple[Any, ...]:
    from control_plane.shipper import parse_sources

    return parse_sources(value)


def _amqp_url(value: str) -> str | None:
    """`amqp://user:password@host:5672/vhost` (amqps:// for TLS)."""
    value = value.strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise _Reason("must be a URL such as amqp://user:password@host:5672/%2F")
    _port_of(parts)
    return value


def _database_url(value: str) -> str | None:
    value = value.strip()
    if value and "://" not in value:
        raise _Reason("must be a URL such as postgresql://user@host/db")
    return value or None


def _optional_url(value: str) -> str | None:
    value = value.strip()
    return _http_url(value) if value else None


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _gateway_name(value: str) -> str | None:
    value = value.strip()
    if value and not _NAME_RE.match(value):
        raise ValueError("must be 1-128 letters, digits and . _ - (a host name works)")
    return value or None


def _readable_file(value: str) -> str | None:
    value = value.strip()
    if not value:
        return None
    if not os.path.isfile(value) or not os.access(value, os.R_OK):
        raise ValueError(f"{value!r} is not a readable file")
    return os.path.abspath(value)


# variable name → (Settings field, parser)
_VARIABLES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "DATABASE_URL": ("database_url", _database_url),
    "SLUICE_ADMIN_TOKEN": ("admin_token", _str),
    "SLUICE_GATEWAY_TOKEN": ("gateway_token", _str),
    "SLUICE_GATEWAYS": ("gateways", _url_list),
    "SLUICE_API_HOST": ("api_host", lambda v: v.strip() or "127.0.0.1"),
    "SLUICE_API_PORT": ("api_port", _port),
    "SLUICE_GATEWAY_PORT": ("gateway_port", _port),
    "SLUICE_INTERNAL_PORT": ("internal_port", _port),
    "SLUICE_GATEWAY_HOST": ("gateway_host", lambda v: v.strip() or "0.0.0.0"),
    "SLUICE_INTERNAL_HOST": ("internal_host", lambda v: v.strip() or "127.0.0.1"),
    "SLUICE_TLS_CERT": ("tls_cert", _str),
    "SLUICE_TLS_KEY": ("tls_key", _str),
    "SLUICE_GATEWAY_TLS_PORT": ("gateway_tls_port", _port),
    "SLUICE_GATEWAY_PLAIN": ("gateway_plain", _bool),
    "SLUICE_LOG_EXCERPTS": ("log_excerpts", _chars),
    "SLUICE_REDIS_URL": ("redis_url", _redis_url),
    "SLUICE_REDIS_FAILURE": ("redis_failure", _redis_failure),
    "SLUICE_CONTROLLER_INTERVAL": ("controller_interval", _positive_float),
    "SLUICE_PUSH_TIMEOUT": ("push_timeout", _positive_float),
    "SLUICE_SECRET_KEY": ("secret_key", _str),
    "SLUICE_COOKIE_SECURE": ("cookie_secure", _bool),
    "SLUICE_ACCESS_LOGS": ("access_logs", _access_logs),
    "SLUICE_CONTROLLER_METRICS_PORT": ("controller_metrics_port", _port),
    "SLUICE_CONTROLLER_METRICS_HOST": ("controller_metrics_host",
                                       lambda v: v.strip() or "127.0.0.1"),
    "SLUICE_MODEL_SLA": ("model_slas", _slas),
    "SLUICE_SCALE_WINDOW": ("scale_window", _positive_float),
    "SLUICE_SCALE_DOWN_RPM": ("scale_down_rpm", _positive_float),
    "SLUICE_SCALE_DOWN_GPU": ("scale_down_gpu", _positive_float),
    "SLUICE_SCALE_UP_RPS": ("scale_up_rps", _positive_float),
    "SLUICE_SCALE_UP_P99_MS": ("scale_up_p99_ms", _positive_float),
    "SLUICE_SCALING_WEBHOOK": ("scaling_webhook", _webhook_url),
    "SLUICE_SHIP_INTERVAL": ("ship_interval", _positive_float),
    "SLUICE_OTLP_ENDPOINT": ("otlp_endpoint", _optional_url),
    "SLUICE_LOG_RETENTION_DAYS": ("log_retention_days", _positive_float),
    "SLUICE_AGENT_TOKEN": ("agent_token", _str),
    "SLUICE_TELEMETRY_STALE_AFTER": ("telemetry_stale_after", _positive_float),
    "SLUICE_WEIGHTS_INTERVAL": ("weights_interval", _positive_float),
    "SLUICE_WEIGHT_COEFFICIENTS": ("weight_coefficients", _coefficients),
    "SLUICE_HEALTH_INTERVAL": ("health_interval", _positive_float),
    "SLUICE_HEALTH_TIMEOUT": ("health_timeout", _positive_float),
    "SLUICE_BREAKER_WINDOW_S": ("breaker_window_s", _positive_float),
    "SLUICE_BREAKER_ERROR_RATE": ("breaker_error_rate", _fraction),
    "SLUICE_BREAKER_MIN_REQUESTS": ("breaker_min_requests", _count),
    "SLUICE_BREAKER_COOLDOWN_S": ("breaker_cooldown_s", _positive_float),
    "SLUICE_BREAKER_PROBES": ("breaker_probes", _count),
    "SLUICE_ADMIN_LOGIN_ATTEMPTS": ("admin_login_attempts", _count),
    "SLUICE_ADMIN_LOCKOUT_S": ("admin_lockout_s", _positive_float),
    "SLUICE_USAGE_INTERVAL": ("usage_interval", _positive_float),
    "SLUICE_RESTART_BACKOFF": ("restart_backoff", _positive_float),
    "SLUICE_RESTART_BACKOFF_MAX": ("restart_backoff_max", _positive_float),
    "SLUICE_RESTART_RESET_AFTER": ("restart_reset_after", _positive_float),
    "SLUICE_DB_CONNECT_TIMEOUT": ("db_connect_timeout", _count),
    "SLUICE_CONTROL_PLANE_URL": ("control_plane_url", _optional_url),
    "SLUICE_GATEWAY_NAME": ("gateway_name", _gateway_name),
    "SLUICE_GATEWAY_ADVERTISE_URL": ("advertise_url", _optional_url),
    "SLUICE_HEARTBEAT_INTERVAL": ("heartbeat_interval", _positive_float),
    "SLUICE_GATEWAY_TTL": ("gateway_ttl", _positive_float),
    "SLUICE_GATEWAY_GONE_AFTER": ("gateway_gone_after", _positive_float),
    "SLUICE_INTERNAL_TLS_CERT": ("internal_tls_cert", _readable_file),
    "SLUICE_INTERNAL_TLS_KEY": ("internal_tls_key", _readable_file),
    "SLUICE_INTERNAL_CA": ("internal_ca", _readable_file),
    "SLUICE_AMQP_URL": ("amqp_url", _amqp_url),
    "SLUICE_JOBS_URL": ("jobs_url", lambda v: _http_url(v.strip()) if v.strip() else None),
    "SLUICE_WORKER_GATEWAY_URL": ("worker_gateway_url",
                                  lambda v: _http_url(v.strip()) if v.strip() else None),
    "SLUICE_JOB_LEASE_S": ("job_lease_s", _positive_float),
    "SLUICE_JOB_WAIT_MAX_S": ("job_wait_max_s", _positive_float),
    "SLUICE_JOB_SWEEP_INTERVAL": ("job_sweep_interval", _positive_float),
    "SLUICE_WEBHOOK_RETRY_FOR_S": ("webhook_retry_for_s", _positive_float),
    "SLUICE_WEBHOOK_ALLOW_PRIVATE": ("webhook_allow_private", _bool),
}


# values that may carry a password or token: errors name the variable and the
# problem, never the value (nor a Python message that may quote part of it)
_SECRET_VARIABLES = {"DATABASE_URL", "SLUICE_REDIS_URL", "SLUICE_AMQP_URL", "SLUICE_SCALING_WEBHOOK",
                     "SLUICE_ADMIN_TOKEN", "SLUICE_GATEWAY_TOKEN", "SLUICE_AGENT_TOKEN",
                     "SLUICE_SECRET_KEY"}


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


# What each variable means, for people: docs/configuration.md is generated from this
# and `_VARIABLES` (python -m control_plane.reference_docs); tests/unit/test_reference_docs.py
# fails when a variable has no description or the file is stale. A value is the
# meaning, or (default as words, meaning) where the field's default alone misleads.
DESCRIPTIONS: dict[str, str | tuple[str, str]] = {
    "DATABASE_URL": ("private cluster under `var/pg` (`sluice up` only)", "PostgreSQL URL"),
    "SLUICE_ADMIN_TOKEN": ("generated into `var/secrets.json` by `sluice up`",
                           "bearer token of the admin API"),
    "SLUICE_GATEWAY_TOKEN": ("generated likewise",
                             "token of the gateways' internal listeners (and of gateway "
                             "registration)"),
    "SLUICE_GATEWAYS": ("the local gateway (`sluice up`)",
                        "comma-separated internal URLs the controller pushes to, beside "
                        "the gateways that register themselves"),
    "SLUICE_API_HOST": "address the admin API listens on",
    "SLUICE_API_PORT": "port of the admin API and UI",
    "SLUICE_GATEWAY_PORT": "the gateway's public plain-HTTP port",
    "SLUICE_INTERNAL_PORT": "the gateway's internal listener (pushes, `/metrics`, stats)",
    "SLUICE_GATEWAY_HOST": ("0.0.0.0 (`sluice up`: 127.0.0.1)",
                            "address `sluice gateway` serves callers on"),
    "SLUICE_INTERNAL_HOST": "address of the internal listener: loopback or a private "
                            "interface only",
    "SLUICE_TLS_CERT": ("none (`sluice up`: its demo certificate under `var/tls`)",
                        "PEM certificate chain (server's first) of the gateway's HTTPS "
                        "listener; set with `SLUICE_TLS_KEY` to turn HTTPS on"),
    "SLUICE_TLS_KEY": ("none (`sluice up`: its demo key)",
                       "PEM key of the gateway's HTTPS listener"),
    "SLUICE_GATEWAY_TLS_PORT": "the gateway's HTTPS port (HTTP/2 by ALPN)",
    "SLUICE_GATEWAY_PLAIN": "`off`: no plain HTTP listener, HTTPS only (needs "
                            "`SLUICE_TLS_CERT`)",
    "SLUICE_LOG_EXCERPTS": "characters of each request body kept in the access log, with "
                           "e-mail addresses, phone, national ID and card numbers masked; "
                           "0 keeps none",
    "SLUICE_REDIS_URL": ("none (limits per gateway)",
                         "`redis://[[user]:password@]host[:port][/db]`: cluster mode, rate "
                         "limits and quotas shared by every gateway using it"),
    "SLUICE_REDIS_FAILURE": "while Redis fails: `open` = each gateway's own counters "
                            "decide, `closed` = limited requests get 503",
    "SLUICE_CONTROLLER_INTERVAL": "seconds between the controller's checks for a new "
                                  "config version",
    "SLUICE_PUSH_TIMEOUT": "seconds one push to a gateway may take",
    "SLUICE_SECRET_KEY": ("generated by `sluice up` (otherwise derived from the admin "
                          "token)", "signs the admin UI's session cookies"),
    "SLUICE_COOKIE_SECURE": "mark the session cookie `Secure`; set it when the UI is "
                            "served over HTTPS",
    "SLUICE_ACCESS_LOGS": ("none (`sluice up`: its gateway's)",
                           "`name=/path/to/access.log,…`: gateway access logs on this host "
                           "the controller or `sluice shipper` ships to PostgreSQL"),
    "SLUICE_CONTROLLER_METRICS_PORT": ("off (`sluice up`: 8002)",
                                       "port of the controller's Prometheus metrics"),
    "SLUICE_CONTROLLER_METRICS_HOST": "address of the controller's metrics",
    "SLUICE_MODEL_SLA": "`model=milliseconds,…`: latency objectives, exported for the "
                        "p99 alert",
    "SLUICE_SCALE_WINDOW": "seconds of inference logs the scaling signals look at",
    "SLUICE_SCALE_DOWN_RPM": "`down` below this many requests per minute …",
    "SLUICE_SCALE_DOWN_GPU": "… and GPU utilisation below this fraction (never without "
                             "telemetry)",
    "SLUICE_SCALE_UP_RPS": "`up` at this many requests per second or more …",
    "SLUICE_SCALE_UP_P99_MS": "… and a p99 latency of this many milliseconds or more",
    "SLUICE_SCALING_WEBHOOK": "URL the controller POSTs changed scaling recommendations to",
    "SLUICE_SHIP_INTERVAL": "seconds between log shipping passes when idle",
    "SLUICE_LOG_RETENTION_DAYS": "inference log rows older than this many days are deleted",
    "SLUICE_AGENT_TOKEN": ("none (only the admin token is accepted)",
                           "token agents use for `POST /api/v1/telemetry` (API and "
                           "`sluice agent`)"),
    "SLUICE_TELEMETRY_STALE_AFTER": "seconds without a report before a GPU is stale (it "
                                    "no longer steers traffic)",
    "SLUICE_WEIGHTS_INTERVAL": "seconds between weight computations and pushes",
    "SLUICE_WEIGHT_COEFFICIENTS": "default memory, success, latency coefficients of the "
                                  "weight formula",
    "SLUICE_HEALTH_INTERVAL": "seconds between backend readiness probes",
    "SLUICE_HEALTH_TIMEOUT": "seconds each readiness probe may take",
    "SLUICE_BREAKER_WINDOW_S": "circuit breaker: seconds of outcomes it judges",
    "SLUICE_BREAKER_ERROR_RATE": "circuit breaker: opens above this share of failures …",
    "SLUICE_BREAKER_MIN_REQUESTS": "… of at least this many requests in the window",
    "SLUICE_BREAKER_COOLDOWN_S": "circuit breaker: seconds open before probing",
    "SLUICE_BREAKER_PROBES": "circuit breaker: requests let through half-open",
    "SLUICE_ADMIN_LOGIN_ATTEMPTS": "wrong admin UI passwords in a row that lock the account",
    "SLUICE_ADMIN_LOCKOUT_S": "seconds a locked admin UI account stays locked",
    "SLUICE_USAGE_INTERVAL": "seconds between collections of the gateways' usage counters "
                             "(and pushes of the fleet's usage back)",
    "SLUICE_RESTART_BACKOFF": "`sluice up`: seconds before restarting a dead child, "
                              "doubling with each death in a row …",
    "SLUICE_RESTART_BACKOFF_MAX": "… up to this many seconds",
    "SLUICE_RESTART_RESET_AFTER": "a child up this many seconds starts over at the first "
                                  "delay",
    "SLUICE_DB_CONNECT_TIMEOUT": "whole seconds the admin API waits for a PostgreSQL "
                                 "connection before answering 503 (libpq's minimum is 2; a "
                                 "`connect_timeout` in `DATABASE_URL` wins)",
    "SLUICE_CONTROL_PLANE_URL": ("none (no registration)",
                                 "admin API base URL `sluice gateway` registers and "
                                 "heartbeats at, with the gateway token"),
    "SLUICE_GATEWAY_NAME": ("the host name",
                            "the name a gateway registers under (unique in the fleet)"),
    "SLUICE_GATEWAY_ADVERTISE_URL": ("the internal listener (this host's address when it "
                                     "listens on 0.0.0.0)",
                                     "internal URL the controller reaches this gateway at"),
    "SLUICE_HEARTBEAT_INTERVAL": "seconds between a gateway's heartbeats",
    "SLUICE_GATEWAY_TTL": "seconds of silence after which a member is `stale` (no longer "
                          "pushed to)",
    "SLUICE_GATEWAY_GONE_AFTER": ("10 × `SLUICE_GATEWAY_TTL`",
                                  "seconds of silence after which a member is `gone` (its "
                                  "row is kept)"),
    "SLUICE_INTERNAL_TLS_CERT": ("none (plain HTTP)",
                                 "PEM file: TLS certificate of the gateway's internal "
                                 "listener"),
    "SLUICE_INTERNAL_TLS_KEY": ("none", "PEM file: its key"),
    "SLUICE_INTERNAL_CA": ("none (system store)",
                           "PEM CA the control plane (and the gateway itself) verifies "
                           "https:// internal listeners against"),
    "SLUICE_AMQP_URL": ("none (`sluice up`: a private RabbitMQ under `var/rabbitmq`)",
                        "`amqp://user:password@host:5672/vhost` (`amqps://` for TLS): the "
                        "broker async jobs are queued in"),
    "SLUICE_JOBS_URL": ("`http://<SLUICE_API_HOST or 127.0.0.1>:<SLUICE_API_PORT>`",
                        "where `sluice gateway` hands async requests (`Prefer: "
                        "respond-async`, `/v1/jobs`, `/v1/files`, `/v1/batches`)"),
    "SLUICE_WORKER_GATEWAY_URL": ("`http://127.0.0.1:<SLUICE_GATEWAY_PORT>`",
                                  "the gateway `sluice worker` sends jobs through"),
    "SLUICE_JOB_LEASE_S": "seconds a running job is a worker's before another may take it "
                          "over; also bounds the worker's wait for the gateway",
    "SLUICE_JOB_WAIT_MAX_S": "seconds a job may keep waiting for room in its model's pool "
                             "before it fails",
    "SLUICE_JOB_SWEEP_INTERVAL": "seconds between sweeps for jobs a broker lost or a dead "
                                 "worker held",
    "SLUICE_WEBHOOK_RETRY_FOR_S": "seconds a webhook delivery is retried (exponential "
                                  "backoff with jitter) before it is marked failed",
    "SLUICE_WEBHOOK_ALLOW_PRIVATE": "allow callback URLs to loopback, link-local and "
                                    "private addresses (refused by default: SSRF)",
    "SLUICE_OTLP_ENDPOINT": ("none (no export)",
                             "OTLP/HTTP collector, e.g. `http://otel:4318` (`/v1/traces` is "
                             "added): the log shipper exports one span per request"),
    # read outside Settings, by one process each
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
