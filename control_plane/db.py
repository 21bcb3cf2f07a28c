"""Engine and session factory. One engine per process; sessions per unit of work."""
from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str, **kwargs) -> Engine:
    """An engine for `url`; `pool_pre_ping` because Postgres restarts under us in dev."""
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("future", True)
    return create_engine(url, **kwargs)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit=False: views render objects after the service has committed.
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=True)
