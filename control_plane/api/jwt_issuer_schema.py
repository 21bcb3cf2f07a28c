"""What a JWT issuer accepts and shows: its keys pasted (`pem` or `jwks`, parsed into
`keys`) or fetched by the controller from `jwks_uri` (controller/jwks_loop.py).

`jwks_uri` is either a JWKS document or an OpenID Connect discovery document (a URL
ending in /.well-known/openid-configuration, whose `jwks_uri` is followed). It must be
https:// unless SLUICE_JWKS_ALLOW_HTTP is set (tests and labs).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from flask import current_app

from control_plane.api import validation as v
from control_plane.api.schemas import COMMON_READ_ONLY, COMMON_SHOWN, Schema, iso
from control_plane.api.validation import Field, described
from control_plane.services import jwt_keys
from control_plane.tables.config import JwtIssuer

KEY_SOURCES = ("pem", "jwks", "jwks_uri")
_KEY = {"kid": {"type": ["string", "null"]}, "alg": {"type": "string"}}
_TIME_OR_NULL = {"type": ["string", "null"], "format": "date-time"}


def _keys(parse, schema: dict[str, Any]):
    @described(schema)
    def wrapped(value: Any) -> list[dict[str, Any]]:
        try:
            return parse(value)
        except jwt_keys.KeyError_ as exc:
            raise ValueError(str(exc)) from None
    return wrapped


class JwtIssuerSchema(Schema):
    """`pem`, `jwks` or `jwks_uri` in; the parsed or fetched `keys` out (kid, alg and
    PEM of each), the keys retiring after a rotation, and the last fetch's outcome."""
    create = {
        "name": Field(v.name, required=True),
        "pem": Field(_keys(jwt_keys.from_pem, {"type": "string", "maxLength": 16384}),
                     write_only=True),
        "jwks": Field(_keys(jwt_keys.from_jwks, {"type": "object"}), write_only=True),
        "jwks_uri": Field(v.http_url(allow_path=True, https=True), nullable=True),
        "issuer": Field(v.text(512), nullable=True),
        "audience": Field(v.text(512), nullable=True),
        "consumer_claim": Field(v.claim_name),
        "enabled": Field(v.boolean),
        "expires_at": Field(v.timestamp, nullable=True),
    }
    update = {k: Field(f.parse, nullable=f.nullable, write_only=f.write_only)
              for k, f in create.items()}
    read_only = COMMON_READ_ONLY + ("keys", "retired_keys", "jwks_fetched_at",
                                    "jwks_last_error")
    shown = {**COMMON_SHOWN,
             "keys": {"type": "array", "items": {
                 "type": "object", "required": ["kid", "alg", "pem"],
                 "additionalProperties": False,
                 "properties": {**_KEY, "pem": {"type": "string"}}}},
             "retired_keys": {"type": "array", "items": {
                 "type": "object", "required": ["kid", "alg", "until"],
                 "additionalProperties": False,
                 "properties": {**_KEY, "until": {"type": "string", "format": "date-time"}}}},
             "jwks_fetched_at": _TIME_OR_NULL,
             "jwks_last_error": {"type": ["string", "null"]}}

    @staticmethod
    def to_row(data: dict[str, Any], *, partial: bool) -> dict[str, Any]:
        """Fold `pem` / `jwks` into the `keys` column (and stop fetching); a `jwks_uri`
        starts with no keys until the controller's first fetch. Exactly one of the
        three on create."""
        given = [f for f in KEY_SOURCES if data.get(f) is not None]
        if len(given) > 1:
            raise v.ValidationError({given[1]: "give one of pem, jwks or jwks_uri"})
        if not given:
            if partial:
                return data
            raise v.ValidationError({"pem": "pem, jwks or jwks_uri is required"})
        row = dict(data)
        if given[0] == "jwks_uri":
            settings = current_app.config["SLUICE_SETTINGS"]
            if row["jwks_uri"].startswith("http://") and not settings.jwks_allow_http:
                raise v.ValidationError({"jwks_uri": "must be an https:// URL (plain "
                                         "http:// only with SLUICE_JWKS_ALLOW_HTTP=1)"})
            if not partial:
                row.update(keys=[], retired_keys=[])
            return row
        row["keys"] = row.pop(given[0])
        row.update(jwks_uri=None, retired_keys=[], jwks_fetched_at=None,
                   jwks_last_error=None)
        return row

    def render(self, j: JwtIssuer) -> dict[str, Any]:
        return {"id": j.id, "name": j.name,
                "keys": [{"kid": k["kid"], "alg": k["alg"], "pem": k["pem"]}
                         for k in j.keys],
                "retired_keys": [{"kid": k["kid"], "alg": k["alg"],
                                  "until": iso(_utc(k["until"]))}
                                 for k in j.retired_keys or ()],
                "jwks_uri": j.jwks_uri, "jwks_fetched_at": iso(j.jwks_fetched_at),
                "jwks_last_error": j.jwks_last_error,
                "issuer": j.issuer, "audience": j.audience,
                "consumer_claim": j.consumer_claim, "enabled": j.enabled,
                "expires_at": iso(j.expires_at), "created_at": iso(j.created_at),
                "updated_at": iso(j.updated_at)}


def _utc(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, timezone.utc)
