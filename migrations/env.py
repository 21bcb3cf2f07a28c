"""Alembic environment: online migrations against the URL control_plane.runtime.migrate passes."""
from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine, pool

from control_plane.db import normalize_url
from control_plane.tables import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    # Passed through attributes, not the ini, so '%' in passwords needs no escaping.
    url = (config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
           or os.environ.get("DATABASE_URL"))
    if not url:
        raise RuntimeError("no database URL: set DATABASE_URL")
    return url


def run_migrations_offline() -> None:
    context.configure(url=normalize_url(_url()), target_metadata=target_metadata,
                      literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(normalize_url(_url()), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(connection=connection, target_metadata=target_metadata,
                              transaction_per_migration=True)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
