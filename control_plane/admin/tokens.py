"""The signed-in user's personal API tokens in the admin UI: list, create (shown
once), revoke. Viewers manage their own tokens too (api/identity.py: a viewer's token
still only reads). Same services and checks as POST /api/v1/tokens."""
from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for

from control_plane.admin.auth import current_user
from control_plane.admin.blueprint import bp
from control_plane.api import tokens as tokens_api
from control_plane.api.validation import timestamp
from control_plane.api.views import API_PREFIX, db
from control_plane.services import admin_tokens
from control_plane.services.errors import Invalid


def _page(errors: dict | None = None, values: dict | None = None, created=None,
          plain: str | None = None, status: int = 200):
    user = current_user()
    return render_template("tokens.html", rows=admin_tokens.listing(db(), user),
                           errors=errors or {}, values=values or {}, created=created,
                           plain=plain, kinds=sorted(tokens_api.known_kinds(API_PREFIX)),
                           ), status


@bp.get("/tokens")
def tokens():
    return _page()


@bp.post("/tokens")
def tokens_create():
    values = {k: request.form.get(k, "").strip() for k in ("name", "scopes", "expires_at")}
    errors = {}
    if not 1 <= len(values["name"]) <= 40:
        errors["name"] = "must be 1 to 40 characters"
    scopes = list(dict.fromkeys(values["scopes"].replace(",", " ").split()))
    expires_at = None
    if values["expires_at"]:
        try:
            expires_at = timestamp(values["expires_at"])
        except ValueError as exc:
            errors["expires_at"] = str(exc)
    try:
        tokens_api.check_scopes(scopes, API_PREFIX)
        if errors:
            raise Invalid(errors)
        row, plain = admin_tokens.create(db(), current_user(), values["name"], scopes,
                                         expires_at)
    except Invalid as exc:
        return _page({**errors, **exc.fields}, values, status=422)
    return _page(created=row, plain=plain, status=201)


@bp.post("/tokens/<int:id>/revoke")
def token_revoke(id: int):
    row = admin_tokens.revoke(db(), id, current_user())
    flash(f"Token {row.name} revoked.")
    return redirect(url_for("admin.tokens"))
