"""The admin web UI under /admin: server-rendered pages over the same services as the
JSON API, with session login, CSRF tokens and roles (admin writes, viewer reads)."""
from __future__ import annotations

from flask import Flask

from control_plane.admin import (auth, dashboard, formats,  # noqa: F401  (routes, filters)
                                  history, pages, second_factor, tokens, usage)
from control_plane.admin.blueprint import bp


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)
