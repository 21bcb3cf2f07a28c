"""The TOTP second factor (issue 31): enrolment (secret shown once, in force after a
first code), recovery codes (hashed, single use), and SLUICE_ADMIN_OTP_REQUIRED:
dangerous changes refused without a fresh code in X-Sluice-OTP, accepted with one."""
from __future__ import annotations

import dataclasses
import hashlib
import re
import time

import pyotp
import pytest
from sqlalchemy import text

from control_plane.api.views import API_PREFIX
from control_plane.services import admin_users


def _as(client, token: str):
    def call(method: str, path: str, otp: str | None = None, **kwargs):
        headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
        if otp is not None:
            headers["X-Sluice-OTP"] = otp
        return client.open(API_PREFIX + path, method=method.upper(), headers=headers,
                           **kwargs)
    return call


@pytest.fixture
def alice(app, api, client):
    with app.extensions["sluice"].sessionmaker() as session:
        admin_users.create_user(session, "alice", "correct horse battery", "admin")
        admin_users.create_user(session, "bob", "correct horse battery", "admin")
    r = api("post", "/tokens", json={"name": "laptop", "user": "alice"})
    assert r.status_code == 201
    return _as(client, r.get_json()["token"])


def _require(app, on: bool = True) -> None:
    app.config["SLUICE_SETTINGS"] = dataclasses.replace(
        app.config["SLUICE_SETTINGS"], admin_otp_required=on)


def _enrol(caller) -> tuple[pyotp.TOTP, list[str]]:
    r = caller("post", "/second-factor")
    assert r.status_code == 201
    secret = r.get_json()["secret"]
    assert r.get_json()["otpauth_uri"].startswith("otpauth://totp/Sluice:alice?secret=")
    totp = pyotp.TOTP(secret)
    r = caller("post", "/second-factor/confirm", json={"code": "000000"
                                                      if totp.now() != "000000" else "1"})
    assert r.status_code == 422 and "code" in r.get_json()["error"]["fields"]
    assert caller("get", "/second-factor").get_json()["enrolled"] is False
    r = caller("post", "/second-factor/confirm", json={"code": totp.now()})
    assert r.status_code == 200, r.get_json()
    return totp, r.get_json()["recovery_codes"]


def _next_code(totp: pyotp.TOTP) -> str:
    # the step after the one just used: within the allowed drift, never used before
    return totp.at(time.time() + 30)


def test_enrolment_shows_the_secret_once_and_needs_a_first_code(app, alice):
    totp, codes = _enrol(alice)
    assert len(codes) == 10 and len(set(codes)) == 10
    status = alice("get", "/second-factor").get_json()
    assert status == {"enrolled": True, "recovery_codes_left": 10, "required": False}
    # a second enrolment would replace it: refused until it is removed
    assert alice("post", "/second-factor").status_code == 409
    with app.extensions["sluice"].sessionmaker() as session:
        stored = session.execute(text("SELECT code_hash FROM admin_recovery_codes")
                                 ).scalars().all()
        audit = session.execute(text("SELECT after FROM audit_log WHERE resource = "
                                     "'admin_users' ORDER BY id DESC LIMIT 1")).scalar_one()
    assert hashlib.sha256(codes[0].replace("-", "").encode()).hexdigest() in stored
    assert audit["totp_secret"] == "[redacted]" and audit["second_factor"] == "enrolled"


def test_a_dangerous_change_needs_a_fresh_code_when_the_policy_is_on(app, api, alice):
    totp, codes = _enrol(alice)
    ids = [alice("post", "/models", json={"name": f"m{i}"}).get_json()["id"]
           for i in range(4)]
    _require(app)
    r = alice("delete", f"/models/{ids[0]}")
    assert r.status_code == 403
    message = r.get_json()["error"]["message"]
    assert "deleting a model needs a fresh second factor" in message
    assert "X-Sluice-OTP" in message
    r = alice("delete", f"/models/{ids[0]}", otp="123456" if totp.now() != "123456" else "1")
    assert r.status_code == 403 and "does not match" in r.get_json()["error"]["message"]
    assert alice("get", f"/models/{ids[0]}").status_code == 200   # still there
    code = _next_code(totp)
    assert alice("delete", f"/models/{ids[0]}", otp=code).status_code == 204
    # the same step is not accepted twice
    r = alice("delete", f"/models/{ids[1]}", otp=code)
    assert r.status_code == 403
    # a recovery code stands in for the app, once
    assert alice("delete", f"/models/{ids[1]}", otp=codes[3]).status_code == 204
    assert alice("delete", f"/models/{ids[2]}", otp=codes[3]).status_code == 403
    assert alice("get", "/second-factor").get_json()["recovery_codes_left"] == 9
    # ordinary changes need nothing
    assert alice("patch", f"/models/{ids[2]}", json={"timeout_ms": 5000}).status_code == 200
    # turning a limit off, a backend's credentials, a webhook secret: dangerous
    r = alice("patch", f"/models/{ids[2]}", json={"max_output_tokens": None})
    assert r.status_code == 403 and "turning off a model's limits" in r.get_json()[
        "error"]["message"]
    backend = api("post", "/backends", json={"name": "b", "model_id": ids[2],
                                             "url": "http://127.0.0.1:9101",
                                             "protocol": "openai"}).get_json()
    assert alice("patch", f"/backends/{backend['id']}", json={"weight": 5}).status_code == 200
    r = alice("patch", f"/backends/{backend['id']}", json={"auth_header": "Bearer new"})
    assert r.status_code == 403 and "backend's credentials" in r.get_json()["error"]["message"]
    consumer = api("post", "/consumers", json={"name": "c"}).get_json()
    r = alice("post", f"/consumers/{consumer['id']}/webhook-secret")
    assert r.status_code == 403 and "webhook secret" in r.get_json()["error"]["message"]
    # the shared bootstrap token has no second factor
    r = api("delete", f"/models/{ids[3]}")
    assert r.status_code == 403 and "shared admin token has none" in r.get_json()[
        "error"]["message"]
    # with the policy off, no code is asked for
    _require(app, False)
    assert api("delete", f"/models/{ids[3]}").status_code == 204


def test_a_user_without_a_second_factor_is_told_to_enrol(app, api, client):
    with app.extensions["sluice"].sessionmaker() as session:
        admin_users.create_user(session, "bob", "correct horse battery", "admin")
    bob = _as(client, api("post", "/tokens", json={"name": "t", "user": "bob"}
                          ).get_json()["token"])
    model = bob("post", "/models", json={"name": "m"}).get_json()
    _require(app)
    r = bob("delete", f"/models/{model['id']}")
    assert r.status_code == 403
    assert "bob has none: enrol one (POST /api/v1/second-factor)" in r.get_json()[
        "error"]["message"]


def test_removing_the_second_factor_needs_its_code(alice):
    totp, _ = _enrol(alice)
    r = alice("delete", "/second-factor")
    assert r.status_code == 403 and "removing a second factor" in r.get_json()["error"][
        "message"]
    assert alice("delete", "/second-factor", otp=_next_code(totp)).status_code == 204
    assert alice("get", "/second-factor").get_json()["enrolled"] is False


def _csrf(resp) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', resp.get_data(as_text=True))
    assert match, resp.get_data(as_text=True)[:500]
    return match.group(1)


def test_the_ui_enrols_and_asks_for_a_fresh_code_before_a_deletion(app, alice, api):
    client = app.test_client()
    csrf = _csrf(client.get("/admin/login"))
    assert client.post("/admin/login", data={"username": "alice", "csrf_token": csrf,
                                             "password": "correct horse battery"}
                       ).status_code == 302
    csrf = _csrf(client.get("/admin/second-factor"))
    page = client.post("/admin/second-factor/begin", data={"csrf_token": csrf}
                       ).get_data(as_text=True)
    totp = pyotp.TOTP(re.search(r'id="totp-secret" class="mono" value="([A-Z2-7]+)"',
                                page).group(1))
    r = client.post("/admin/second-factor/confirm", data={"csrf_token": csrf,
                                                          "code": totp.now()})
    assert r.status_code == 200
    assert len(re.findall(r"<li>[0-9a-f]{5}-[0-9a-f]{5}</li>", r.get_data(as_text=True))) == 10
    model = api("post", "/models", json={"name": "ui-m"}).get_json()
    _require(app)
    with client.session_transaction() as s:
        s.pop("otp_at", None)   # the proof at enrolment is not fresh any more
    r = client.post(f"/admin/models/{model['id']}/delete", data={"csrf_token": csrf})
    assert r.status_code == 302 and "/admin/second-factor" in r.headers["Location"]
    assert api("get", f"/models/{model['id']}").status_code == 200
    r = client.post("/admin/second-factor/verify", data={"csrf_token": csrf,
                                                         "code": _next_code(totp)})
    assert r.status_code == 302
    r = client.post(f"/admin/models/{model['id']}/delete", data={"csrf_token": csrf})
    assert r.status_code == 302 and "/admin/second-factor" not in r.headers["Location"]
    assert api("get", f"/models/{model['id']}").status_code == 404
