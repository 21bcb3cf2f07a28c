"""A backend's request shape (the header its key goes in, other headers, the path
map, the query string) and the values a preset asks for: their parsers, and the
backend input with its preset applied (control_plane/services/presets.py)."""
from __future__ import annotations

import re
from typing import Any

from control_plane.api import validation as v
from control_plane.api.validation import Field, described
from control_plane.services import presets
from control_plane.services.errors import Invalid

MAX_HEADERS = 16
MAX_PATHS = 16
MAX_HEADER_VALUE = 1024
_TOKEN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$"
_TOKEN_RE = re.compile(_TOKEN)
# headers the gateway writes itself (or that frame the request): never an operator's
RESERVED_HEADERS = frozenset((
    "host", "content-length", "content-type", "connection", "transfer-encoding", "te",
    "upgrade", "keep-alive", "proxy-connection", "accept-encoding", "x-request-id",
    "traceparent", "tracestate"))
# the credentials' own headers: auth_header and auth_header_name say where a key goes
_CREDENTIAL_HEADERS = frozenset(("authorization", "x-api-key"))
_QUERY = r"^[A-Za-z0-9._~%=&+:,-]{1,1024}$"
_QUERY_RE = re.compile(_QUERY)
_SEGMENT_SCHEMA = {"type": "string", "pattern": "^[A-Za-z0-9._~-]{1,256}$"}
_URL = v.http_url(allow_path=True, https=True)


@described({"type": "string", "pattern": _TOKEN})
def header_name(value: Any) -> str:
    """The header a backend's key goes in ("api-key", "x-goog-api-key")."""
    if not isinstance(value, str) or not _TOKEN_RE.match(value) \
            or value.lower() in RESERVED_HEADERS:
        raise ValueError("must be an HTTP header name (1-64 token characters) the gateway "
                         "does not set itself")
    return value


@described({"type": "object", "maxProperties": MAX_HEADERS,
            "propertyNames": {"pattern": _TOKEN},
            "additionalProperties": {"type": "string", "minLength": 1,
                                     "maxLength": MAX_HEADER_VALUE,
                                     "pattern": "^[^\\x00-\\x1f\\x7f]+$"}})
def header_map(value: Any) -> dict[str, str]:
    """Other headers sent to the backend as they are ({"anthropic-version": ...}); not
    secrets (they are shown): a key goes in auth_header."""
    if not isinstance(value, dict) or len(value) > MAX_HEADERS:
        raise ValueError(f"must be an object of at most {MAX_HEADERS} header names and values")
    parse_value = v.header_value(MAX_HEADER_VALUE)
    out: dict[str, str] = {}
    for name, val in value.items():
        if name.lower() in _CREDENTIAL_HEADERS:
            raise ValueError(f"must not name {name}: a key goes in auth_header "
                             "(auth_header_name says which header)")
        try:
            out[header_name(name)] = parse_value(val)
        except ValueError as exc:
            raise ValueError(f"{name!r}: {exc}") from None
    return out


_PATH_SCHEMA = {"type": "string", "pattern": "^/[^\\s?#]*$", "maxLength": 1024}


@described({"type": "object", "maxProperties": MAX_PATHS,
            "propertyNames": _PATH_SCHEMA, "additionalProperties": _PATH_SCHEMA})
def path_map(value: Any) -> dict[str, str]:
    """The gateway's backend paths ("/v1/chat/completions") -> this backend's, under
    its URL's path (Azure: "/chat/completions")."""
    if not isinstance(value, dict) or len(value) > MAX_PATHS:
        raise ValueError(f"must be an object of at most {MAX_PATHS} paths")
    try:
        return {v.url_path(k): v.url_path(p) for k, p in value.items()}
    except ValueError as exc:
        raise ValueError(f"must map paths to paths: {exc}") from None


@described({"type": "string", "pattern": _QUERY})
def query_string(value: Any) -> str:
    """The query string sent with every request ("api-version=2024-10-21")."""
    if not isinstance(value, str) or not _QUERY_RE.match(value):
        raise ValueError("must be a query string such as api-version=2024-10-21 (no ? or #)")
    return value


@described(_SEGMENT_SCHEMA)
def segment(value: Any) -> str:
    if not isinstance(value, str) or not re.match(_SEGMENT_SCHEMA["pattern"], value):
        raise ValueError("must be 1-256 letters, digits and . _ ~ -")
    return value


# The backend's own shape fields (columns) and the preset values (inputs only).
SHAPE_FIELDS = {
    # the preset that filled the backend (GET /api/v1/backend-presets)
    "preset": Field(v.one_of(*presets.NAMES), nullable=True),
    # the header auth_header goes in (null: Authorization)
    "auth_header_name": Field(header_name, nullable=True),
    "headers": Field(header_map, nullable=True),
    "paths": Field(path_map, nullable=True),
    "query": Field(query_string, nullable=True),
}
PRESET_FIELDS = {
    # the vendor's key, written as the preset says into auth_header (write-only)
    "api_key": Field(v.header_value(4096), write_only=True),
    "base_url": Field(_URL, write_only=True),
    "resource": Field(segment, write_only=True),
    "deployment": Field(segment, write_only=True),
    "upstream_model": Field(segment, write_only=True),
    "api_version": Field(segment, write_only=True),
}


def to_row(data: dict[str, Any], *, partial: bool) -> dict[str, Any]:
    """Validated backend input -> its columns, the preset (if any) applied. Created
    backends need a protocol and a URL, from the input or its preset."""
    row = presets.apply(data)
    if "url" in row and "url" not in data:
        try:
            row["url"] = _URL(row["url"])
        except ValueError as exc:
            raise Invalid({"url": f"made by the preset: {exc}"}) from None
    if not partial:
        missing = {f: "is required (or a preset that sets it)"
                   for f in ("url", "protocol") if row.get(f) is None}
        if missing:
            raise Invalid(missing)
    return row
