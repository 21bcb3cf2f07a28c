"""Gateways an operator lists in SLUICE_GATEWAYS, as rows of `gateways` (members that
register themselves are services/membership.py's)."""
from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.tables.config import Gateway


def _name_for(url: str, taken: set[str]) -> str:
    base = urlsplit(url).netloc or "gateway"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


def ensure_gateways(session: Session, urls: Iterable[str]) -> list[Gateway]:
    """Upsert a gateway row for each internal URL (by URL); return them. Commits."""
    try:
        rows = list(session.scalars(select(Gateway)))
        # operator-listed rows only: a member (services/membership.py) is not adopted
        by_url = {g.internal_url: g for g in rows if not g.registered}
        taken = {g.name for g in rows}
        result = []
        for url in urls:
            url = url.rstrip("/")
            gateway = by_url.get(url)
            if gateway is None:
                gateway = Gateway(name=_name_for(url, taken), internal_url=url)
                session.add(gateway)
                by_url[url] = gateway
                taken.add(gateway.name)
            result.append(gateway)
        session.commit()
        return result
    except BaseException:
        session.rollback()
        raise
