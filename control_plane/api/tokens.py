"""Personal API tokens in the admin API (services/admin_tokens.py, api/identity.py).

    POST   /api/v1/tokens        {"name", "scopes", "expires_at"} -> 201, the token once
    GET    /api/v1/tokens        {"items": [...]}: the caller's tokens
    DELETE /api/v1/tokens/{id}   revoke one of the caller's tokens -> 204

Called with a personal token, these act on that token's user. Called with the shared
bootstrap token (first setup), POST must name the `user` (a service account's first
token, say), GET lists every user's tokens and DELETE revokes anyone's.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, current_app, jsonify
from sqlalchemy.orm import Session

from control_plane.api import identity
from control_plane.api.errors import ApiError
from control_plane.api.schemas import iso
from control_plane.api.validation import Field, described, text, timestamp, validate
from control_plane.services import admin_tokens, admin_users
from control_plane.services.errors import Invalid
from control_plane.tables.identity import AdminToken

MAX_SCOPES = 32
_SCOPE = r"^[a-z][a-z0-9-]{0,31}$"
_SCOPE_RE = re.compile(_SCOPE)


@described({"type": "array", "maxItems": MAX_SCOPES,
            "items": {"type": "string", "pattern": _SCOPE}})
def scope_list(value: Any) -> list[str]:
    """`read`, or resource kinds (checked against the API's routes by the view)."""
    if (not isinstance(value, list) or len(value) > MAX_SCOPES
            or not all(isinstance(s, str) and _SCOPE_RE.match(s) for s in value)):
        raise ValueError("must be a list of scopes: \"read\", or resource kinds such as "
                         "\"models\"")
    return list(dict.fromkeys(value))


TOKEN_CREATE = {
    "name": Field(text(40), required=True),
    "scopes": Field(scope_list, nullable=True),
    "expires_at": Field(timestamp, nullable=True),
    "user": Field(text(64)),   # the bootstrap token only: whose token
}
_STRING = {"type": "string"}
_TIME = {"type": ["string", "null"], "format": "date-time"}
TOKEN_SHOWN = {
    "id": {"type": "integer"}, "name": _STRING, "user": _STRING, "role": _STRING,
    "prefix": _STRING, "scopes": {"type": "array", "items": _STRING},
    "expires_at": _TIME, "revoked_at": _TIME, "last_used_at": _TIME,
    "created_at": {"type": "string", "format": "date-time"},
}


def render(t: AdminToken) -> dict[str, Any]:
    return {"id": t.id, "name": t.name, "user": t.user.username, "role": t.user.role,
            "prefix": t.prefix, "scopes": list(t.scopes), "expires_at": iso(t.expires_at),
            "revoked_at": iso(t.revoked_at), "last_used_at": iso(t.last_used_at),
            "created_at": iso(t.created_at)}


def known_kinds(prefix: str) -> set[str]:
    """The resource kinds a scope may name: the API's first path segments."""
    return {identity.kind_of(rule.rule, prefix) for rule in current_app.url_map.iter_rules()
            if rule.rule.startswith(prefix + "/")} - {"openapi.json"}


def check_scopes(scopes: list[str], prefix: str) -> None:
    unknown = [s for s in scopes if s != admin_tokens.READ and s not in known_kinds(prefix)]
    if unknown:
        raise Invalid({"scopes": f"unknown scope {unknown[0]!r}: use \"read\" or a "
                                 "resource kind such as \"models\" or \"backends\""})


def register(bp: Blueprint, db: Callable[[], Session], json_body: Callable[[], Any],
             prefix: str) -> None:
    def create() -> tuple[Response, int]:
        data = validate(json_body(), TOKEN_CREATE)
        caller = identity.caller_token()
        scopes = data.get("scopes") or []
        check_scopes(scopes, prefix)
        if caller is None:
            user = admin_users.find(db(), data.get("user", ""))
            if user is None:
                raise Invalid({"user": "the shared admin token creates tokens for a named "
                                       "admin user or service account: no such user"})
        else:
            user = caller.user
            if data.get("user", user.username) != user.username:
                raise ApiError(403, "a personal token creates tokens for its own user only")
            # a token never mints a token that can do more than itself
            if caller.scopes and (not scopes or not set(scopes) <= set(caller.scopes)):
                raise ApiError(403, f"token {caller.name!r} may only create tokens within "
                                    f"its own scopes ({', '.join(caller.scopes)})")
        row, plain = admin_tokens.create(db(), user, data["name"], scopes,
                                         data.get("expires_at"))
        return jsonify({**render(row), "token": plain}), 201

    def listing() -> Response:
        caller = identity.caller_token()
        rows = admin_tokens.listing(db(), None if caller is None else caller.user)
        return jsonify({"items": [render(r) for r in rows]})

    def revoke(id: int) -> tuple[str, int]:
        caller = identity.caller_token()
        admin_tokens.revoke(db(), id, None if caller is None else caller.user)
        return "", 204

    bp.add_url_rule("/tokens", "tokens_create", create, methods=["POST"])
    bp.add_url_rule("/tokens", "tokens_list", listing, methods=["GET"])
    bp.add_url_rule("/tokens/<int:id>", "tokens_revoke", revoke, methods=["DELETE"])
