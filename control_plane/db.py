"""Engine and session factory. One engine per process; sessions per unit of work."""
from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker


def normalize_url(url: str | URL) -> URL:
    """Pin plain `postgresql://` (and Heroku-style `postgres://`) URLs to psycopg2.

    SQLAlchemy 2.1 maps a bare `postgresql://` to psycopg 3, which we do not ship;
    operators should not have to know which driver we use.
    """
    if isinstance(url, str) and url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg2")
    return parsed


def make_engine(url: str | URL, **kwargs) -> Engine:
    """An engine for `url`; `pool_pre_ping` because Postgres restarts under us in dev."""
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(normalize_url(url), **kwargs)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit=False: views render objects after the service has committed.
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=True)
