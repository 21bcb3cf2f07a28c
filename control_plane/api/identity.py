"""Who is calling the admin API, and what their token lets them do.

Two kinds of admin credentials open /api/v1:

- the shared bootstrap token (SLUICE_ADMIN_TOKEN), for `sluice up` and first setup;
  refused once SLUICE_ADMIN_TOKEN_ENABLED is false;
- a personal token (services/admin_tokens.py), acting as its user: the user's role
  (a viewer reads only) narrowed by the token's scopes.

A scope is `read` (every GET) or a resource kind: the first path segment after
/api/v1 (`models`, `backends`, `tokens`…), which allows every method on that kind.
A token with no scopes has its user's whole role.
"""
from __future__ import annotations

from flask import current_app, g
from sqlalchemy.orm import Session

from control_plane.api.errors import ApiError
from control_plane.services import admin_tokens
from control_plane.tables.identity import AdminToken

READS = ("GET", "HEAD")
# A viewer may still manage their own tokens: that changes nothing they could not read.
VIEWER_WRITABLE = ("tokens",)


def kind_of(path: str, prefix: str) -> str:
    """The resource kind of an API path: its first segment after the prefix."""
    return path.removeprefix(prefix).strip("/").split("/", 1)[0]


def missing_scope(scopes: list[str], method: str, kind: str) -> str | None:
    """What a token with `scopes` lacks for `method` on `kind` (None: allowed)."""
    if not scopes or kind in scopes:
        return None
    if method in READS:
        return None if admin_tokens.READ in scopes else f"`{admin_tokens.READ}` or `{kind}`"
    return f"`{kind}`"


def bootstrap_allowed() -> None:
    if not current_app.config["SLUICE_SETTINGS"].admin_token_enabled:
        raise ApiError(401, "the shared admin token (SLUICE_ADMIN_TOKEN) is turned off "
                            "(SLUICE_ADMIN_TOKEN_ENABLED=false): use a personal API token",
                       headers={"WWW-Authenticate": 'Bearer realm="sluice-admin"'})
    g.api_token = None


def personal(session: Session, given: str, method: str, path: str,
             prefix: str) -> AdminToken | None:
    """The personal token `given`, checked against the request (ApiError when it may
    not make it); None when it is no personal token at all."""
    try:
        token = admin_tokens.authenticate(session, given)
    except admin_tokens.Refused as refused:
        raise ApiError(401, refused.reason + ": create a new token",
                       headers={"WWW-Authenticate": 'Bearer realm="sluice-admin", '
                                                    'error="invalid_token"'}) from None
    if token is None:
        return None
    kind = kind_of(path, prefix)
    missing = missing_scope(token.scopes, method, kind)
    if missing is not None:
        scope = missing.split("`")[1]
        raise ApiError(403, f"token {token.name!r} has the scopes "
                            f"{', '.join(token.scopes)}: {method} {path} needs the scope "
                            f"{missing}",
                       headers={"WWW-Authenticate": 'Bearer realm="sluice-admin", '
                                                    f'error="insufficient_scope", '
                                                    f'scope="{scope}"'})
    if (token.user.role != "admin" and method not in READS
            and kind not in VIEWER_WRITABLE):
        raise ApiError(403, f"{token.user.username}'s role is {token.user.role}: the token "
                            "can read, but not change anything")
    g.api_token = token
    return token


def caller_token() -> AdminToken | None:
    """The personal token of this request; None for the bootstrap token."""
    return g.get("api_token")
