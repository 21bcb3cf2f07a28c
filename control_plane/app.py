"""Flask application factory for the admin API."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Flask
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from control_plane.api import errors, views
from control_plane.db import make_engine, make_sessionmaker
from control_plane.settings import SettingsError, load_settings

MAX_BODY_BYTES = 1 << 20


@dataclass
class Database:
    engine: Engine
    sessionmaker: sessionmaker[Session]


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    """Build the app from the environment; `test_config` overrides it.

    `test_config` may carry DATABASE_URL and ADMIN_TOKEN (instead of the environment's
    DATABASE_URL and SLUICE_ADMIN_TOKEN) and any Flask setting. No connection is made
    here, so the app is safe to build before a pre-forking server forks.
    """
    overrides = dict(test_config or {})
    settings = load_settings()
    database_url = overrides.pop("DATABASE_URL", None) or settings.database_url
    admin_token = overrides.pop("ADMIN_TOKEN", None) or settings.admin_token
    if not database_url:
        raise SettingsError("DATABASE_URL is required")
    if not admin_token:
        # An admin API without a token would be open to anyone who can reach it.
        raise SettingsError("SLUICE_ADMIN_TOKEN is required")

    app = Flask(__name__)
    app.config.update(
        SLUICE_SETTINGS=settings,
        DATABASE_URL=database_url,
        ADMIN_TOKEN=admin_token,
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
    )
    app.config.update(overrides)

    engine = make_engine(database_url)
    app.extensions["sluice"] = Database(engine, make_sessionmaker(engine))

    errors.register_error_handlers(app)
    views.init_app(app)
    return app


def dispose(app: Flask) -> None:
    """Close the app's pooled connections (tests, and before a process exits)."""
    app.extensions["sluice"].engine.dispose()
