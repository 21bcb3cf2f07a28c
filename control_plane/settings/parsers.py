"""The parsers of Settings' fields (control_plane.settings): the text of a variable to
the field's value, ValueError when malformed. A parser that returns None leaves the
field at its default. `Reason` is a problem in words we wrote alone, safe to show for a
secret variable. Also SettingsError. Imports nothing of ours."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit


class SettingsError(ValueError):
    """A variable is missing or malformed; the message names the variable."""


def text(value: str) -> str | None:
    value = value.strip()
    return value or None


def port(value: str) -> int:
    port = int(value)
    if not 1 <= port <= 65535:
        raise ValueError("must be a port number between 1 and 65535")
    return port


def chars(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("must be a number of characters >= 0")
    return number


def positive_float(value: str) -> float:
    number = float(value)
    if not number > 0 or number != number or number == float("inf"):
        raise ValueError("must be a positive number of seconds")
    return number


def count(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError("must be a whole number >= 1")
    return number


def fraction(value: str) -> float:
    number = float(value)
    if not 0 < number <= 1:
        raise ValueError("must be a fraction in (0, 1], e.g. 0.3")
    return number


def coefficients(value: str) -> tuple[float, float, float]:
    parts = [p.strip() for p in value.split(",")]
    if len(parts) != 3:
        raise ValueError("must be three numbers: memory,success,latency (e.g. 0.6,0.3,0.1)")
    nums = tuple(float(p) for p in parts)
    if any(not 0 <= n <= 1 for n in nums) or sum(nums) <= 0:
        raise ValueError("each coefficient must be in [0, 1] and their sum positive")
    return nums  # type: ignore[return-value]


class Reason(ValueError):
    """A problem in words we wrote, free of the value it judges (ValueErrors raised by
    Python itself, such as urlsplit's port errors, may quote part of the value)."""


def _port_of(parts) -> int | None:
    try:
        return parts.port
    except ValueError:
        raise Reason("the port must be a number in 0..65535") from None


def http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL")
    parts.port  # raises ValueError on a bad port
    return value.rstrip("/")


def webhook_url(value: str) -> str | None:
    """An http(s) URL that may carry a token: its errors never quote it."""
    value = value.strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Reason("must be an http(s) URL")
    _port_of(parts)
    return value.rstrip("/")


def url_list(value: str) -> tuple[str, ...]:
    return tuple(http_url(item.strip()) for item in value.split(",") if item.strip())


_ORIGIN_RE = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?$")


def cors_origins(value: str) -> tuple[str, ...]:
    """`*`, or comma-separated origins (`scheme://host[:port]`, as browsers send them)."""
    items = tuple(item.strip() for item in value.split(",") if item.strip())
    if items == ("*",):
        return items
    for item in items:
        if not _ORIGIN_RE.match(item):
            raise Reason(f"{item!r} is not an origin such as https://app.example.com "
                         "(scheme, host and port only), nor *")
    return items


def flag(value: str) -> bool:
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
        raise Reason("must be a URL such as redis://[:password@]host:6379/0")
    port = _port_of(parts) or 6379
    if parts.query or parts.fragment:
        raise Reason("takes no query or fragment")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise Reason("the database must be a number such as /0")
    return RedisURL(host=parts.hostname, port=port, db=int(path or 0),
                    username=unquote(parts.username) if parts.username else None,
                    password=unquote(parts.password) if parts.password else None)


def redis_url(value: str) -> str | None:
    value = value.strip()
    if value:
        parse_redis_url(value)
    return value or None


def redis_failure(value: str) -> str:
    value = value.strip().lower() or "open"
    if value not in ("open", "closed"):
        raise ValueError("must be open or closed")
    return value


def slas(value: str) -> tuple[tuple[str, float], ...]:
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


def amqp_url(value: str) -> str | None:
    """`amqp://user:password@host:5672/vhost` (amqps:// for TLS)."""
    value = value.strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise Reason("must be a URL such as amqp://user:password@host:5672/%2F")
    _port_of(parts)
    return value


def database_url(value: str) -> str | None:
    value = value.strip()
    if value and "://" not in value:
        raise Reason("must be a URL such as postgresql://user@host/db")
    return value or None


def optional_url(value: str) -> str | None:
    value = value.strip()
    return http_url(value) if value else None


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def gateway_name(value: str) -> str | None:
    value = value.strip()
    if value and not _NAME_RE.match(value):
        raise ValueError("must be 1-128 letters, digits and . _ - (a host name works)")
    return value or None


def readable_file(value: str) -> str | None:
    value = value.strip()
    if not value:
        return None
    if not os.path.isfile(value) or not os.access(value, os.R_OK):
        raise ValueError(f"{value!r} is not a readable file")
    return os.path.abspath(value)


@dataclass(frozen=True)
class Source:
    """One gateway's access log: `name` goes into the `gateway` column."""
    name: str
    path: Path


def parse_sources(value: str) -> tuple[Source, ...]:
    """`name=/path/access.log,other=/path2/access.log` (a bare path names itself)."""
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, path = item.partition("=")
        if not sep:
            name, path = item, item
        if not name.strip() or not path.strip():
            raise ValueError(f"{item!r} is not NAME=PATH")
        out.append(Source(name.strip()[:256], Path(path.strip())))
    return tuple(out)
