"""Fleet membership: gateways that register themselves and heartbeat.

A gateway (`sluice gateway` with SLUICE_CONTROL_PLANE_URL, runtime/membership.py)
POSTs its registration every SLUICE_HEARTBEAT_INTERVAL; each POST is the heartbeat.
Members are keyed by name. A member's state comes from the database clock, so
controllers and API processes on different hosts agree:

    live    last heard within the TTL (SLUICE_GATEWAY_TTL)   pushed to
    stale   silent longer than the TTL                      not pushed to
    gone    silent longer than `gone_after`, or left         not pushed to; row kept

Gateways an operator listed (SLUICE_GATEWAYS, or created through the API) are not
members: they are always `live` and always pushed to.

A member that comes back with another boot id restarted: its acked version is
forgotten, so the controller pushes the current snapshot at its next tick.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from control_plane.services.errors import Conflict
from control_plane.tables.config import Gateway


@dataclass(frozen=True)
class Registration:
    name: str
    internal_url: str
    boot_id: str
    sluice_version: str
    leaving: bool = False


def db_now(session: Session) -> datetime:
    return session.scalar(select(func.now()))


def state(row: Gateway, now: datetime, ttl: float, gone_after: float) -> str:
    """live, stale or gone (see the module's table)."""
    if not row.registered:
        return "live"
    if row.left_at is not None or row.last_seen_at is None:
        return "gone"
    silent = (now - row.last_seen_at).total_seconds()
    if silent <= ttl:
        return "live"
    return "stale" if silent <= gone_after else "gone"


def live(session: Session, ttl: float) -> list[Gateway]:
    """The gateways to push to: every listed one and every live member, by id."""
    cutoff = func.now() - timedelta(seconds=ttl)
    return list(session.scalars(
        select(Gateway).where(or_(
            Gateway.registered.is_(False),
            (Gateway.left_at.is_(None)) & (Gateway.last_seen_at >= cutoff)))
        .order_by(Gateway.id)))


def register(session: Session, reg: Registration, ttl: float) -> tuple[Gateway, bool]:
    """Record one registration or heartbeat; commits. Returns the row and whether
    the gateway (re)joined: new, back from stale or gone, or another boot."""
    with session.begin():
        now = db_now(session)
        row = session.scalars(select(Gateway).where(Gateway.name == reg.name)
                              .with_for_update()).one_or_none()
        if row is not None and not row.registered:
            raise Conflict(f"gateway {reg.name!r} is listed by an operator; a member "
                           "must register under another name (SLUICE_GATEWAY_NAME)")
        # Whoever held this address before is not there any more: one gateway must not
        # be pushed to (nor its usage collected) under two rows.
        for other in session.scalars(select(Gateway).where(
                Gateway.internal_url == reg.internal_url, Gateway.name != reg.name,
                Gateway.registered.is_(True), Gateway.left_at.is_(None))):
            other.left_at = now
        listed = session.scalar(select(Gateway.name).where(
            Gateway.internal_url == reg.internal_url, Gateway.registered.is_(False)))
        if listed is not None:
            raise Conflict(f"{reg.internal_url} is the internal URL of gateway {listed!r}, "
                           "which an operator listed")
        joined = True
        if row is None:
            row = Gateway(name=reg.name, internal_url=reg.internal_url, registered=True)
            session.add(row)
        else:
            fresh = (row.left_at is None and row.last_seen_at is not None
                     and (now - row.last_seen_at).total_seconds() <= ttl
                     and row.boot_id == reg.boot_id and row.internal_url == reg.internal_url)
            joined = not fresh
            if row.boot_id != reg.boot_id or row.internal_url != reg.internal_url:
                # another start or another listener: we no longer know what it serves
                row.acked_version = None
                row.last_error = None
        row.internal_url = reg.internal_url
        row.boot_id = reg.boot_id
        row.sluice_version = reg.sluice_version
        row.last_seen_at = now
        row.left_at = now if reg.leaving else None
    return row, joined


def describe(row: Gateway, now: datetime, current: int, ttl: float,
             gone_after: float) -> dict[str, Any]:
    """The membership fields the API and the admin UI show for one gateway."""
    st = state(row, now, ttl, gone_after)
    return {"state": st, "live": st == "live",
            "lag": None if row.acked_version is None else max(current - row.acked_version, 0),
            "on_current_version": row.acked_version == current}
