"""A small validator for JSON bodies: per-field parsers, field-level messages.

A parser takes the decoded JSON value and returns the clean value or raises
ValueError whose message completes "<field> ..." for an operator. Each parser also
carries the JSON Schema of what it accepts (and of what it returns, when that differs),
set with `described`: control_plane/api/openapi.py renders the OpenAPI document from
them, so the document and the checks cannot drift apart.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from control_plane.tables.config import NAME_PATTERN

Parser = Callable[[Any], Any]
_NAME_RE = re.compile(NAME_PATTERN)
_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*\.?$")


class ValidationError(Exception):
    def __init__(self, fields: dict[str, str], message: str | None = None):
        self.fields = fields
        if message is None:
            message = "invalid fields: " + ", ".join(sorted(fields))
        super().__init__(message)


def described(accepts: dict[str, Any], returns: dict[str, Any] | None = None
              ) -> Callable[[Parser], Parser]:
    """Attach to a parser the JSON Schema (OpenAPI 3.1) of the values it accepts and,
    when it normalises them into another shape, of the values it returns."""
    def attach(parse: Parser) -> Parser:
        parse.json_schema = accepts            # type: ignore[attr-defined]
        parse.output_schema = returns or accepts   # type: ignore[attr-defined]
        return parse
    return attach


def documented(parse: Parser, accepts: dict[str, Any],
               returns: dict[str, Any] | None = None) -> Parser:
    """A parser from a module below the API, with its JSON Schema, on a wrapper (the
    module's own function is left as it is)."""
    @described(accepts, returns)
    def wrapped(value: Any) -> Any:
        return parse(value)
    wrapped.__doc__ = parse.__doc__
    return wrapped


def accepts(parse: Parser) -> dict[str, Any]:
    """The JSON Schema of what `parse` accepts; a parser without one is a bug."""
    try:
        return parse.json_schema               # type: ignore[attr-defined]
    except AttributeError:
        raise TypeError(f"parser {parse!r} has no JSON Schema: wrap it in described()") \
            from None


def returns(parse: Parser) -> dict[str, Any]:
    accepts(parse)
    return parse.output_schema                 # type: ignore[attr-defined]


@dataclass(frozen=True)
class Field:
    parse: Parser
    required: bool = False
    nullable: bool = False
    # accepted but never shown (a secret, or an input folded into another field)
    write_only: bool = False


def validate(data: Any, schema: Mapping[str, Field], *, partial: bool = False,
             read_only: tuple[str, ...] = ()) -> dict[str, Any]:
    """Check a JSON object against `schema`; collect every field's problem at once.

    partial=True (PATCH): absent fields stay absent, nothing is required.
    """
    if not isinstance(data, dict):
        raise ValidationError({}, "request body must be a JSON object")
    errors: dict[str, str] = {}
    clean: dict[str, Any] = {}
    for key in data:
        if key not in schema:
            errors[key] = "is read-only" if key in read_only else "is not a known field"
    for name, field in schema.items():
        if name not in data:
            if partial:
                continue
            if field.required:
                errors[name] = "is required"
            continue  # absent: the column's default applies
        value = data[name]
        if value is None:
            if field.nullable:
                clean[name] = None
            else:
                errors[name] = "must not be null"
            continue
        try:
            clean[name] = field.parse(value)
        except ValueError as exc:
            errors[name] = str(exc)
    if errors:
        raise ValidationError(errors)
    return clean


# parsers

NAME_SCHEMA = {"type": "string", "pattern": NAME_PATTERN, "maxLength": 128}


@described(NAME_SCHEMA)
def name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise ValueError("must be 1-128 characters of letters, digits and . _ : / -, "
                         "starting with a letter or digit")
    return value


def text(max_len: int = 128) -> Parser:
    @described({"type": "string", "maxLength": max_len})
    def parse(value: Any) -> str:
        if not isinstance(value, str) or len(value) > max_len:
            raise ValueError(f"must be a string of at most {max_len} characters")
        return value
    return parse


def integer(lo: int, hi: int) -> Parser:
    @described({"type": "integer", "minimum": lo, "maximum": hi})
    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"must be an integer between {lo} and {hi}")
        return value
    return parse


@described({"type": "boolean"})
def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def one_of(*choices: str) -> Parser:
    @described({"type": "string", "enum": list(choices)})
    def parse(value: Any) -> str:
        if value not in choices:
            raise ValueError("must be one of: " + ", ".join(choices))
        return value
    return parse


@described({"type": "array", "items": NAME_SCHEMA})
def name_list(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(
            isinstance(v, str) and _NAME_RE.match(v) for v in value):
        raise ValueError("must be null (every model) or a list of model names")
    return list(dict.fromkeys(value))  # drop duplicates, keep order


_ATTR_KEY = r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"
_ATTR_KEY_RE = re.compile(_ATTR_KEY)
SCALAR_SCHEMA = {"anyOf": [{"type": "string", "maxLength": 256},
                           {"type": ["number", "boolean"]}]}


@described({"type": "object", "maxProperties": 32, "propertyNames": {"pattern": _ATTR_KEY},
            "additionalProperties": SCALAR_SCHEMA})
def attributes(value: Any) -> dict[str, Any]:
    """A flat object of scalar facts: {"user_type": "vip", "tier": 2}."""
    message = ("must be an object of at most 32 names ([A-Za-z_][A-Za-z0-9_.-]*) "
               "to strings, numbers or booleans")
    if not isinstance(value, dict) or len(value) > 32:
        raise ValueError(message)
    for k, val in value.items():
        if not _ATTR_KEY_RE.match(k) or not isinstance(val, (str, int, float, bool)) or (
                isinstance(val, str) and len(val) > 256):
            raise ValueError(message)
    return value


def number(lo: float, hi: float) -> Parser:
    @described({"type": "number", "minimum": lo, "maximum": hi})
    def parse(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not lo <= value <= hi:
            raise ValueError(f"must be a number between {lo:g} and {hi:g}")
        return value
    return parse


def object_of(fields: Mapping[str, Parser], max_keys: int = 256) -> Parser:
    """An object {name: {field: value}} whose inner fields are all optional."""
    message = (f"must be an object of at most {max_keys} model names to objects with "
               "any of: " + ", ".join(fields))
    inner_schema = {"type": "object", "minProperties": 1, "additionalProperties": False,
                    "properties": {f: {"anyOf": [accepts(p), {"type": "null"}]}
                                   for f, p in fields.items()}}

    @described({"type": "object", "maxProperties": max_keys,
                "propertyNames": NAME_SCHEMA, "additionalProperties": inner_schema})
    def parse(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict) or len(value) > max_keys:
            raise ValueError(message)
        clean: dict[str, Any] = {}
        for key, inner in value.items():
            if not _NAME_RE.match(key) or not isinstance(inner, dict) or not inner:
                raise ValueError(message)
            out = {}
            for field, val in inner.items():
                if field not in fields:
                    raise ValueError(f"{key}.{field} is not a known field; " + message)
                try:
                    out[field] = None if val is None else fields[field](val)
                except ValueError as exc:
                    raise ValueError(f"{key}.{field} {exc}") from None
            clean[key] = out
        return clean
    return parse


def http_url(*, allow_path: bool, https: bool = False) -> Parser:
    """An http:// URL (https:// too when `https`) with a hostname or IPv4 address,
    optional port and base path."""
    scheme_shape = "http[s]" if https else "http"
    shape = f"{scheme_shape}://host:port[/base]" if allow_path else f"{scheme_shape}://host:port"
    schemes = ("http", "https") if https else ("http",)

    @described({"type": "string", "format": "uri", "maxLength": 2048,
                "pattern": "^https?://" if https else "^http://"})
    def parse(value: Any) -> str:
        message = f"must be a URL of the form {shape}"
        if not isinstance(value, str) or len(value) > 2048:
            raise ValueError(message)
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError:
            raise ValueError(message) from None
        host = parts.hostname or ""
        if (parts.scheme not in schemes or not _HOST_RE.match(host) or parts.username
                or parts.password or parts.query or parts.fragment or "#" in value
                or "?" in value or port == 0):
            raise ValueError(message)
        path = parts.path.rstrip("/")
        if path and not allow_path:
            raise ValueError(message)
        netloc = host.lower() + (f":{port}" if port else "")
        return f"{parts.scheme}://{netloc}{path}"
    return parse


@described({"type": "string", "maxLength": 253, "pattern": _HOST_RE.pattern})
def hostname(value: Any) -> str:
    """A DNS name (or IPv4 address) as TLS verifies it and SNI sends it."""
    if not isinstance(value, str) or len(value) > 253 or not _HOST_RE.match(value):
        raise ValueError("must be a host name such as api.example.com")
    return value.lower().rstrip(".")


@described({"anyOf": [{"type": "number"}, {"type": "string", "format": "date-time"}]},
           {"type": "string", "format": "date-time"})
def timestamp(value: Any) -> datetime:
    """Unix seconds, or ISO 8601 (UTC when no offset is given)."""
    message = "must be Unix seconds or an ISO 8601 date-time such as 2030-01-01T00:00:00Z"
    if isinstance(value, bool):
        raise ValueError(message)
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(value, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise ValueError(message) from None
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(message) from None
        if dt.tzinfo is None:
            return dt.replace(tzinfo=timezone.utc)
        try:
            # in UTC: PostgreSQL refuses offsets past 15:59 that Python takes
            return dt.astimezone(timezone.utc)
        except OverflowError:
            raise ValueError(message) from None
    raise ValueError(message)


@described({"type": "integer", "minimum": 1, "maximum": 2**31 - 1})
def identifier(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
        raise ValueError("must be the integer id of an existing resource")
    return value


def header_value(max_len: int) -> Parser:
    """A single-line HTTP header value (e.g. "Bearer sk-...")."""
    @described({"type": "string", "minLength": 1, "maxLength": max_len,
                "pattern": "^[^\\x00-\\x1f\\x7f]+$"})
    def parse(value: Any) -> str:
        if (not isinstance(value, str) or not value or len(value) > max_len
                or any(ord(c) < 0x20 or ord(c) == 0x7f for c in value)):
            raise ValueError(f"must be a non-empty header value of at most {max_len} "
                             "printable characters")
        return value
    return parse


_CLAIM = r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$"
_CLAIM_RE = re.compile(_CLAIM)


@described({"type": "string", "pattern": _CLAIM})
def claim_name(value: Any) -> str:
    if not isinstance(value, str) or not _CLAIM_RE.match(value):
        raise ValueError("must be a claim name of 1-64 letters, digits and _ . : -")
    return value


_POINTER = r"^(/([^~/]|~[01])*)*$"
_POINTER_RE = re.compile(_POINTER)


@described({"type": "string", "pattern": "^/[^\\s?#]*$", "maxLength": 1024})
def url_path(value: Any) -> str:
    """A path on a backend, such as /generate or /api/v2/infer."""
    if not isinstance(value, str) or not value.startswith("/") or len(value) > 1024 or \
            any(c.isspace() or c in "?#" for c in value):
        raise ValueError("must be a path starting with / (no spaces, query or fragment)")
    return value


@described({"type": "object"})
def json_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    return value


@described({"type": "object", "required": ["output"], "additionalProperties": False,
            "properties": {"output": {"type": "string", "pattern": _POINTER},
                           "error": {"type": "string", "pattern": _POINTER}}})
def mapping_response(value: Any) -> dict[str, str]:
    """{"output": <JSON pointer>, "error": <JSON pointer, optional>}."""
    message = ('must be an object {"output": "/json/pointer", "error": "/optional/pointer"} '
               "with RFC 6901 JSON pointers")
    if not isinstance(value, dict) or not set(value) <= {"output", "error"} or \
            "output" not in value:
        raise ValueError(message)
    for ptr in value.values():
        if not isinstance(ptr, str) or not _POINTER_RE.match(ptr):
            raise ValueError(message)
    return value


@described({"type": "array", "minItems": 1, "maxItems": 1000,
            "items": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "\\S"}})
def term_list(value: Any) -> list[str]:
    """1-1000 distinct non-empty terms of at most 200 characters, matched lowercased."""
    if (not isinstance(value, list) or not 1 <= len(value) <= 1000 or not all(
            isinstance(t, str) and 1 <= len(t.strip()) and len(t) <= 200 for t in value)):
        raise ValueError("must be a list of 1 to 1000 non-empty strings of at most "
                         "200 characters")
    return list(dict.fromkeys(t.strip().lower() for t in value))


COEFFICIENT_NAMES = ("memory", "success", "latency")


@described({"type": "object", "required": list(COEFFICIENT_NAMES),
            "additionalProperties": False,
            "properties": {k: {"type": "number", "minimum": 0, "maximum": 1}
                           for k in COEFFICIENT_NAMES}})
def coefficients(value: Any) -> dict[str, float]:
    """Weight-formula coefficients: {"memory": 0.6, "success": 0.3, "latency": 0.1}."""
    if not isinstance(value, dict) or set(value) != set(COEFFICIENT_NAMES):
        raise ValueError("must be an object with exactly the keys memory, success, latency")
    out = {}
    for key in COEFFICIENT_NAMES:
        v = value[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            raise ValueError(f"{key} must be a number in [0, 1]")
        out[key] = float(v)
    if sum(out.values()) <= 0:
        raise ValueError("the coefficients must not all be 0")
    return out
