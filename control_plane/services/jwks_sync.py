"""What a fetch of an issuer's `jwks_uri` does to its row: the fetched set becomes
`keys`; a key that left it moves to `retired_keys` and keeps verifying until its
`until` (now + SLUICE_JWKS_GRACE_S), then is dropped; a failed fetch keeps the keys
and records `jwks_last_error`. The config version is bumped only when the keys the
gateways hold change (keys or retired_keys), so an unchanged set pushes nothing.

A key is known by its PEM (a kid may be absent, or reused with new material).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.services.config_state import bump_version
from control_plane.tables.config import JwtIssuer


def merge(keys: list[dict[str, Any]], retired: list[dict[str, Any]],
          fetched: list[dict[str, Any]] | None, now: float,
          grace_s: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(keys, retired_keys) after a fetch (`fetched` None: it failed) at `now` (Unix s).
    Retired keys whose grace has passed are dropped either way."""
    if fetched is None:
        return keys, [r for r in retired if r["until"] > now]
    current = {k["pem"] for k in fetched}
    out = [r for r in retired if r["until"] > now and r["pem"] not in current]
    kept = {r["pem"] for r in out}
    out += [{**k, "until": now + grace_s} for k in keys
            if k["pem"] not in current and k["pem"] not in kept]
    return fetched, out


def record(session: Session, issuer_id: int, url: str, fetched: list[dict[str, Any]] | None,
           error: str | None, grace_s: float) -> bool:
    """Write one fetch's outcome to the issuer (unless it was deleted, disabled or its
    URL changed meanwhile); True when its keys changed (the version was bumped)."""
    with session.begin():
        issuer = session.scalars(select(JwtIssuer).where(JwtIssuer.id == issuer_id)
                                 .with_for_update()).one_or_none()
        if issuer is None or issuer.jwks_uri != url:
            return False
        now = datetime.now(timezone.utc)
        keys, retired = merge(issuer.keys, issuer.retired_keys, fetched, now.timestamp(),
                              grace_s)
        if fetched is not None:
            issuer.jwks_fetched_at = now
        issuer.jwks_last_error = error
        if keys == issuer.keys and retired == issuer.retired_keys:
            return False
        issuer.keys, issuer.retired_keys = keys, retired
        bump_version(session)
        return True


def due(session: Session) -> list[tuple[int, str, str]]:
    """(id, name, jwks_uri) of the enabled issuers that fetch their keys."""
    return [(i.id, i.name, i.jwks_uri) for i in session.scalars(
        select(JwtIssuer).where(JwtIssuer.enabled, JwtIssuer.jwks_uri.is_not(None))
        .order_by(JwtIssuer.id))]
