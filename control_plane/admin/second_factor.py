"""The second factor in the admin UI: the signed-in user enrols (secret shown once,
confirmed by a first code, recovery codes shown once), proves it for the next few
minutes ("fresh"), or removes it. With SLUICE_ADMIN_OTP_REQUIRED, `check_fresh`
(run after auth._guard, which registered first) refuses a dangerous change without a fresh proof: deleting
a model, backend or consumer, changing a backend's credentials, turning a model's
limits off — what api/second_factor.py guards in the API."""
from __future__ import annotations

import time

from flask import (Response, current_app, flash, redirect, render_template, request, session,
                   url_for)

from control_plane.admin.auth import current_user
from control_plane.admin.blueprint import bp
from control_plane.api.second_factor import BACKEND_SECRETS, GUARDED_DELETES
from control_plane.api.views import db
from control_plane.services import second_factor
from control_plane.services.errors import Conflict, Invalid
from control_plane.services.resources import MODELS

FRESH_S = 300   # a proven second factor covers the dangerous changes of five minutes
MODEL_LIMITS = ("max_output_tokens", "max_request_bytes")


def _page(status: int = 200, **extra) -> tuple[str, int]:
    user = current_user()
    return render_template(
        "second_factor.html", enrolled=second_factor.enrolled(user),
        codes_left=second_factor.recovery_codes_left(db(), user),
        required=current_app.config["SLUICE_SETTINGS"].admin_otp_required,
        next=request.values.get("next", ""), **extra), status


def _dangerous() -> str | None:
    """The dangerous change this UI request makes (None: not one)."""
    args = request.view_args or {}
    kind = args.get("kind")
    if request.endpoint == "admin.resource_delete" and kind in GUARDED_DELETES:
        return GUARDED_DELETES[kind]
    if request.endpoint != "admin.resource_edit" or request.method != "POST":
        return None
    form = request.form
    if kind == "backends" and any(form.get(k) or form.get(k + "__clear")
                                  for k in BACKEND_SECRETS):
        return "changing a backend's credentials"
    if kind == "models":
        row = MODELS.get(db(), args["id"])
        if (any(getattr(row, k) is not None and not form.get(k, "").strip()
                for k in MODEL_LIMITS) or (row.mask_pii and not form.get("mask_pii"))):
            return "turning off a model's limits"
    return None


@bp.before_request
def check_fresh() -> Response | None:
    """A redirect to the proof page when this request needs a fresh second factor."""
    if not current_app.config["SLUICE_SETTINGS"].admin_otp_required:
        return None
    what = _dangerous()
    if what is None or time.time() - session.get("otp_at", 0) < FRESH_S:
        return None
    flash(f"{what.capitalize()} needs your second factor: type a code, then do it again.")
    return redirect(url_for("admin.second_factor_page", next=request.referrer or ""))


@bp.get("/second-factor")
def second_factor_page():
    return _page()


@bp.post("/second-factor/begin")
def second_factor_begin():
    try:
        secret, uri = second_factor.begin(db(), current_user())
    except Conflict as exc:
        return _page(409, error=str(exc))
    return _page(secret=secret, uri=uri)


@bp.post("/second-factor/confirm")
def second_factor_confirm():
    try:
        codes = second_factor.confirm(db(), current_user(), request.form.get("code", ""))
    except (Conflict, Invalid) as exc:
        message = exc.fields["code"] if isinstance(exc, Invalid) else str(exc)
        return _page(422, error=f"The code {message}.")
    session["otp_at"] = time.time()
    return _page(recovery_codes=codes)


@bp.post("/second-factor/verify")
def second_factor_verify():
    how = second_factor.verify(db(), current_user(), request.form.get("code", ""))
    if how is None:
        return _page(403, error="That code does not match, or was already used.")
    session["otp_at"] = time.time()
    flash(f"Second factor proven ({how}) for the next {FRESH_S // 60} minutes.")
    target = request.form.get("next", "")
    return redirect(target if target.startswith("/admin") else url_for("admin.dashboard"))


@bp.post("/second-factor/remove")
def second_factor_remove():
    user = current_user()
    if second_factor.verify(db(), user, request.form.get("code", "")) is None:
        return _page(403, error="Removing your second factor needs a current code.")
    second_factor.remove(db(), user)
    session.pop("otp_at", None)
    flash("Second factor removed.")
    return redirect(url_for("admin.second_factor_page"))
