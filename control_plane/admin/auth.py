"""Who may use the admin UI: session login, a CSRF token per session, roles.

Every request to /admin passes `_guard`: it loads the signed-in user from the
database (so disabling a user or changing a password ends their sessions), checks the
CSRF token of every POST, and refuses writes to viewers with 403 — the templates
hiding buttons is a courtesy, this is the rule.
"""
from __future__ import annotations

import hmac
import logging
import secrets
from urllib.parse import urlsplit

from flask import (Response, abort, current_app, flash, g, redirect, render_template, request,
                   session, url_for)
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException

from control_plane.admin.blueprint import bp
from control_plane.api.errors import (DATABASE_RETRY_AFTER, database_unreachable,
                                      describe_database_error, request_id)
from control_plane.api.views import db
from control_plane.services import admin_users, audit
from control_plane.services.errors import NotFound
from control_plane.tables.config import AdminUser

log = logging.getLogger(__name__)

# Reachable without a session; every other admin endpoint needs one.
PUBLIC = {"admin.login", "admin.static"}
# POSTs a viewer may make: signing out changes nothing but their own session, their
# own API tokens can do no more than they can (api/identity.py), their second factor
# is theirs.
VIEWER_POSTS = {"admin.login", "admin.logout", "admin.tokens_create", "admin.token_revoke",
                "admin.second_factor_begin", "admin.second_factor_confirm",
                "admin.second_factor_verify", "admin.second_factor_remove"}
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def csrf_token() -> str:
    token = session.get("csrf")
    if token is None:
        token = session["csrf"] = secrets.token_urlsafe(32)
    return token


def _session_stamp(user: AdminUser) -> str:
    # Tail of the password hash: a new password invalidates every older session.
    return (user.password_hash or "")[-16:]


def current_user() -> AdminUser | None:
    return g.get("admin_user")


def can_write() -> bool:
    user = current_user()
    return user is not None and user.role == "admin"


@bp.app_template_global()
def csrf_field_value() -> str:
    return csrf_token()


@bp.context_processor
def _template_context() -> dict:
    return {"current_user": current_user(), "can_write": can_write()}


@bp.before_request
def _guard() -> Response | None:
    if request.endpoint == "admin.static":
        return None
    user = None
    uid = session.get("uid")
    if uid is not None:
        user = admin_users.get(db(), uid)
        if user is None or not user.enabled or session.get("stamp") != _session_stamp(user):
            session.clear()
            user = None
    g.admin_user = user
    if user is not None:
        # the audit trail names the signed-in user (services/audit.py)
        g.audit_actor = f"ui:{user.username}"
        audit.set_actor(g.audit_actor, request_id())
    if request.method not in ("GET", "HEAD"):
        sent = request.form.get("csrf_token") or request.headers.get("X-CSRF-Token", "")
        expected = session.get("csrf", "")
        if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
            abort(400, "the form has expired or did not come from this site; "
                       "reload the page and try again")
    if user is None and request.endpoint not in PUBLIC:
        if request.path.endswith(".json"):
            abort(401, "sign in first")
        return redirect(url_for("admin.login", next=request.full_path.rstrip("?")))
    if (request.method not in ("GET", "HEAD") and request.endpoint not in VIEWER_POSTS
            and not can_write()):
        abort(403, "your role is viewer: you can look, but not change anything")
    return None


@bp.after_request
def _security_headers(resp: Response) -> Response:
    resp.headers.setdefault("Content-Security-Policy", CSP)
    resp.headers.setdefault("X-Frame-Options", "DENY")
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    resp.headers.setdefault("Referrer-Policy", "same-origin")
    if request.endpoint != "admin.static":
        resp.headers["Cache-Control"] = "no-store"
    return resp


def _safe_next(target: str | None) -> str:
    """Only paths inside /admin: never an open redirect to another site."""
    if target:
        parts = urlsplit(target)
        if not parts.scheme and not parts.netloc and parts.path.startswith("/admin"):
            return target
    return url_for("admin.dashboard")


@bp.route("/login", methods=["GET", "POST"])
def login() -> Response | str | tuple[str, int]:
    if request.method == "GET":
        if current_user() is not None:
            return redirect(url_for("admin.dashboard"))
        csrf_token()
        return render_template("login.html", next=request.args.get("next", ""))
    username = request.form.get("username", "").strip()
    password = request.form.get("password", "")
    settings = current_app.config["SLUICE_SETTINGS"]
    try:
        user = admin_users.authenticate(db(), username, password,
                                        settings.admin_login_attempts, settings.admin_lockout_s)
    except admin_users.Locked as locked:
        log.warning("admin UI: sign-in for %r from %s refused: account locked for %d s",
                    username[:64], request.remote_addr, locked.retry_after)
        html = render_template("login.html", next=request.form.get("next", ""),
                               username=username,
                               error="Too many wrong passwords for this account: try again "
                                     f"in {locked.retry_after} seconds.")
        return Response(html, 429, {"Retry-After": str(locked.retry_after)})
    if user is None:
        log.info("admin UI: failed sign-in for %r from %s", username[:64], request.remote_addr)
        return render_template("login.html", next=request.form.get("next", ""),
                               username=username,
                               error="Wrong username or password."), 401
    session.clear()  # a fresh session (and CSRF token) for the signed-in user
    session.permanent = True
    session["uid"] = user.id
    session["stamp"] = _session_stamp(user)
    csrf_token()
    log.info("admin UI: %s signed in (%s)", user.username, user.role)
    return redirect(_safe_next(request.form.get("next")))


@bp.post("/logout")
def logout() -> Response:
    session.clear()
    flash("You are signed out.")
    return redirect(url_for("admin.login"))


@bp.errorhandler(HTTPException)
def _http_error(exc: HTTPException) -> tuple[str, int]:
    return render_template("error.html", code=exc.code, title=exc.name,
                           message=exc.description), exc.code or 500


@bp.errorhandler(NotFound)
def _not_found(exc: NotFound) -> tuple[str, int]:
    return render_template("error.html", code=404, title="Not found", message=str(exc)), 404


@bp.errorhandler(sa_exc.DBAPIError)
@bp.errorhandler(sa_exc.TimeoutError)
def _database(exc: sa_exc.SQLAlchemyError) -> Response | tuple[str, int]:
    if not database_unreachable(exc):
        return _internal(exc)
    log.warning("admin UI: database unreachable on %s %s: %s", request.method, request.path,
                describe_database_error(exc))
    html = render_template(
        "error.html", code=503, title="Database unavailable",
        message="The admin UI cannot reach its database right now, so it cannot show or "
                "change anything. The gateways keep serving on the configuration they "
                f"have. This page will work again once the database is back: try again "
                f"in {DATABASE_RETRY_AFTER} seconds.")
    return Response(html, 503, {"Retry-After": str(DATABASE_RETRY_AFTER)})


@bp.errorhandler(Exception)
def _internal(exc: Exception) -> tuple[str, int]:
    log.exception("admin UI: unhandled error on %s %s", request.method, request.path)
    return render_template("error.html", code=500, title="Internal error",
                           message="Something went wrong on our side; the server log "
                                   "has the details."), 500
