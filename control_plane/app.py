"""Flask application factory: the admin API (/api/v1) and the admin UI (/admin)."""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from flask import Flask
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from control_plane import admin
# usage, observability, probes and openapi add routes to views.bp when imported
from control_plane.api import errors, observability, openapi, probes, usage, views  # noqa: F401
from control_plane.api import jobs_admin, jobs_service  # noqa: F401
from control_plane.db import make_engine, make_sessionmaker, normalize_url
from control_plane.settings import SettingsError, load_settings

MAX_BODY_BYTES = 1 << 20


@dataclass
class Database:
    engine: Engine
    sessionmaker: sessionmaker[Session]


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    """Build the app from the environment; `test_config` overrides it.

    `test_config` may carry DATABASE_URL and ADMIN_TOKEN (instead of the environment's
    DATABASE_URL and SLUICE_ADMIN_TOKEN) and any Flask setting (SECRET_KEY instead of
    SLUICE_SECRET_KEY). No connection is made
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
        SECRET_KEY=settings.secret_key or _derived_secret(admin_token),
        # The admin UI's session cookie: never readable by scripts, not sent on
        # cross-site subrequests, Secure when served over TLS (SLUICE_COOKIE_SECURE).
        SESSION_COOKIE_NAME="sluice_admin",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.cookie_secure,
        PERMANENT_SESSION_LIFETIME=timedelta(hours=12),
    )
    app.config.update(overrides)

    # A database that does not answer turns into 503 database_unavailable after
    # SLUICE_DB_CONNECT_TIMEOUT, not into a request hanging until gunicorn kills it;
    # pool_pre_ping (db.make_engine) reconnects by itself once it is back.
    connect_args = {}
    url = normalize_url(database_url)
    if url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = settings.db_connect_timeout
    engine = make_engine(database_url, connect_args=connect_args)
    app.extensions["sluice"] = Database(engine, make_sessionmaker(engine))

    errors.register_error_handlers(app)
    views.init_app(app)
    admin.init_app(app)
    observability.init_app(app)   # its routes joined views.bp when it was imported
    app.register_blueprint(probes.bp)   # /healthz and /readyz, no token
    app.register_blueprint(jobs_service.bp)   # /sluice-jobs/..., gateways only
    return app


def _derived_secret(admin_token: str) -> str:
    """Without SLUICE_SECRET_KEY, sign sessions with a key derived from the admin token:
    stable across workers and restarts, and as secret as the token itself."""
    return hmac.new(admin_token.encode("utf-8"), b"sluice admin session",
                    hashlib.sha256).hexdigest()


def dispose(app: Flask) -> None:
    """Close the app's pooled connections (tests, and before a process exits)."""
    app.extensions["sluice"].engine.dispose()
