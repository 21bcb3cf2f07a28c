"""The second factor in the admin API: enrolment, and the policy that dangerous
changes need a fresh code (SLUICE_ADMIN_OTP_REQUIRED) in the X-Sluice-OTP header.

    GET    /api/v1/second-factor           {"enrolled", "recovery_codes_left", "required"}
    POST   /api/v1/second-factor           201 {"secret", "otpauth_uri"}: shown once
    POST   /api/v1/second-factor/confirm   {"code"} -> {"recovery_codes": [...]}: once
    DELETE /api/v1/second-factor           204 (always needs X-Sluice-OTP)

All act on the personal token's user; the shared bootstrap token has no user, so it
can neither enrol nor make a dangerous change while the policy is on.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from sqlalchemy.orm import Session

from control_plane.api import identity
from control_plane.api.errors import ApiError
from control_plane.api.validation import Field, text, validate
from control_plane.services import second_factor
from control_plane.tables.config import AdminUser

HEADER = "X-Sluice-OTP"
KIND = "second-factor"
CONFIRM = {"code": Field(text(32), required=True)}
# Deleting these needs the second factor.
GUARDED_DELETES = {"models": "deleting a model", "backends": "deleting a backend",
                   "consumers": "deleting a consumer"}
BACKEND_SECRETS = ("auth_header", "tls_client_cert", "tls_client_key")
# Model fields whose null (or false) turns a limit or a protection off.
MODEL_LIMITS = {"max_output_tokens": None, "max_request_bytes": None, "mask_pii": False}


def _body() -> dict[str, Any]:
    try:
        data = json.loads(request.get_data(cache=True) or b"{}")
    except (ValueError, RecursionError):
        return {}   # the view refuses it, saying why
    return data if isinstance(data, dict) else {}


def dangerous(method: str, path: str, prefix: str) -> str | None:
    """What dangerous change this request is (None: not one)."""
    parts = path.removeprefix(prefix).strip("/").split("/")
    kind, item = parts[0], len(parts) == 2 and parts[1].isdigit()
    if method == "DELETE" and item and kind in GUARDED_DELETES:
        return GUARDED_DELETES[kind]
    if method == "DELETE" and parts == [KIND]:
        return "removing a second factor"
    if method == "POST" and kind == "consumers" and parts[2:] == ["webhook-secret"]:
        return "rotating a webhook secret"
    if method == "PATCH" and item and kind == "backends":
        if any(k in _body() for k in BACKEND_SECRETS):
            return "changing a backend's credentials"
    if method == "PATCH" and item and kind == "models":
        body = _body()
        if any(k in body and body[k] == off for k, off in MODEL_LIMITS.items()):
            return "turning off a model's limits"
    return None


def require(method: str, path: str, prefix: str, session: Session) -> None:
    """Refuse a dangerous change without a fresh second factor (403 naming it)."""
    what = dangerous(method, path, prefix)
    if what is None:
        return
    if not (current_app.config["SLUICE_SETTINGS"].admin_otp_required
            or what == "removing a second factor"):
        return
    token = identity.caller_token()
    if token is None:
        raise ApiError(403, f"{what} needs a fresh second factor "
                            "(SLUICE_ADMIN_OTP_REQUIRED): the shared admin token has none; "
                            f"use a personal token and send its user's code in {HEADER}")
    user = token.user
    if not second_factor.enrolled(user):
        raise ApiError(403, f"{what} needs a fresh second factor, and {user.username} has "
                            f"none: enrol one (POST /api/v1/{KIND}), then send its code "
                            f"in {HEADER}")
    code = request.headers.get(HEADER, "")
    if not code:
        raise ApiError(403, f"{what} needs a fresh second factor: send the current code "
                            f"of {user.username}'s authenticator app (or a recovery code) "
                            f"in {HEADER}")
    if second_factor.verify(session, user, code) is None:
        raise ApiError(403, f"{what} needs a fresh second factor: the {HEADER} code does "
                            "not match, or was already used")


def _user() -> AdminUser:
    token = identity.caller_token()
    if token is None:
        raise ApiError(403, "the shared admin token has no user: a second factor belongs "
                            "to a person's (or service account's) personal token")
    return token.user


def register(bp: Blueprint, db: Callable[[], Session], json_body: Callable[[], Any]) -> None:
    def show() -> Response:
        user = _user()
        return jsonify({"enrolled": second_factor.enrolled(user),
                        "recovery_codes_left": second_factor.recovery_codes_left(db(), user),
                        "required": current_app.config["SLUICE_SETTINGS"].admin_otp_required})

    def begin() -> tuple[Response, int]:
        secret, uri = second_factor.begin(db(), _user())
        return jsonify({"secret": secret, "otpauth_uri": uri}), 201

    def confirm() -> Response:
        data = validate(json_body(), CONFIRM)
        return jsonify({"recovery_codes": second_factor.confirm(db(), _user(), data["code"])})

    def remove() -> tuple[str, int]:
        second_factor.remove(db(), _user())   # `require` checked the code already
        return "", 204

    bp.add_url_rule(f"/{KIND}", "second_factor_show", show, methods=["GET"])
    bp.add_url_rule(f"/{KIND}", "second_factor_begin", begin, methods=["POST"])
    bp.add_url_rule(f"/{KIND}/confirm", "second_factor_confirm", confirm, methods=["POST"])
    bp.add_url_rule(f"/{KIND}", "second_factor_remove", remove, methods=["DELETE"])
