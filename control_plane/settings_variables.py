"""The environment variables `Settings` reads: each one's field and parser.

`_VARIABLES` maps a variable's name to the `Settings` field it fills and the parser that
turns its text into the field's value. A parser raises ValueError; `_Reason` when the
words are ours alone, safe to show for a variable in `_SECRET_VARIABLES`.
settings.load_settings applies them.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit


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
    from control_plane.controller.ship_loop import parse_sources

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
