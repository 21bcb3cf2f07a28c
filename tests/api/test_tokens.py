"""Personal API tokens (issue 31): created, listed and revoked by their users, stored
hashed and shown once, acting with the user's role narrowed by their scopes; refused
when expired or revoked; named in the audit trail; the bootstrap token turned off by
a setting. A probe walks every operation of the admin OpenAPI document with a
`read`-scoped token."""
from __future__ import annotations

import dataclasses
import hashlib
import re

import pytest
from sqlalchemy import text

from control_plane.api.openapi import document
from control_plane.api.views import API_PREFIX
from control_plane.services import admin_users


@pytest.fixture
def people(app):
    with app.extensions["sluice"].sessionmaker() as session:
        admin_users.create_user(session, "alice", "correct horse battery", "admin")
        admin_users.create_user(session, "victor", "correct horse battery", "viewer")
        admin_users.create_user(session, "ci-bot", None, "admin")   # a service account


@pytest.fixture
def issue(api, people):
    """A new token through the bootstrap token: issue("alice", scopes=[...])."""
    def create(user: str, **fields):
        r = api("post", "/tokens", json={"name": fields.pop("name", "t"), "user": user,
                                          **fields})
        assert r.status_code == 201, r.get_json()
        return r.get_json()
    return create


def _as(client, token: str):
    def call(method: str, path: str, **kwargs):
        headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
        return client.open(API_PREFIX + path, method=method.upper(), headers=headers,
                           **kwargs)
    return call


def test_a_token_is_shown_once_stored_hashed_and_acts_as_its_user(app, client, issue):
    created = issue("alice", name="laptop")
    plain = created["token"]
    assert plain.startswith("sluice_") and len(plain) > 40
    assert created["user"] == "alice" and created["role"] == "admin"
    assert created["scopes"] == [] and created["last_used_at"] is None
    alice = _as(client, plain)
    # her own token lists her tokens, without the plain token
    r = alice("post", "/tokens", json={"name": "ci", "scopes": ["read"],
                                       "expires_at": "2099-01-01T00:00:00Z"})
    assert r.status_code == 201 and r.get_json()["user"] == "alice"
    listed = alice("get", "/tokens").get_json()["items"]
    assert [t["name"] for t in listed] == ["ci", "laptop"]
    assert all("token" not in t for t in listed)
    assert listed[1]["last_used_at"] is not None    # the last use is recorded
    with app.extensions["sluice"].sessionmaker() as session:
        stored = session.execute(text("SELECT token_hash FROM admin_tokens")).scalars().all()
    assert hashlib.sha256(plain.encode()).hexdigest() in stored
    assert plain not in stored
    # she writes, and the audit trail names her and the token
    assert alice("post", "/models", json={"name": "m1"}).status_code == 201
    rows = alice("get", "/audit?resource=model").get_json()["items"]
    assert rows[0]["actor"] == f"token:alice/laptop#{created['id']}"


def test_the_bootstrap_token_lists_every_users_tokens_a_person_only_theirs(client, api,
                                                                         issue):
    a = issue("alice")
    issue("ci-bot", name="deploy")
    assert {t["user"] for t in api("get", "/tokens").get_json()["items"]} == {
        "alice", "ci-bot"}
    alice = _as(client, a["token"])
    assert {t["user"] for t in alice("get", "/tokens").get_json()["items"]} == {"alice"}
    other = [t for t in api("get", "/tokens").get_json()["items"] if t["user"] == "ci-bot"]
    assert alice("delete", f"/tokens/{other[0]['id']}").status_code == 404
    r = alice("post", "/tokens", json={"name": "x", "user": "ci-bot"})
    assert r.status_code == 403
    # the bootstrap token must say whose token it makes
    r = api("post", "/tokens", json={"name": "x"})
    assert r.status_code == 422 and "user" in r.get_json()["error"]["fields"]


def test_revoked_and_expired_tokens_get_401_saying_why(client, api, issue, app):
    t = issue("ci-bot", name="deploy")
    bot = _as(client, t["token"])
    assert bot("get", "/models").status_code == 200
    assert bot("delete", f"/tokens/{t['id']}").status_code == 204
    r = bot("get", "/models")
    assert r.status_code == 401
    assert "'deploy' was revoked" in r.get_json()["error"]["message"]
    assert r.get_json()["error"]["type"] == "unauthorized"
    # an expiry in the past is refused at creation; one that passes, at use
    r = api("post", "/tokens", json={"name": "old", "user": "alice",
                                     "expires_at": "2001-01-01T00:00:00Z"})
    assert r.status_code == 422 and "expires_at" in r.get_json()["error"]["fields"]
    short = issue("alice", name="short", expires_at="2099-01-01T00:00:00Z")
    with app.extensions["sluice"].sessionmaker() as session:
        session.execute(text("UPDATE admin_tokens SET expires_at = now() - interval '1 s' "
                             "WHERE id = :id"), {"id": short["id"]})
        session.commit()
    r = _as(client, short["token"])("get", "/models")
    assert r.status_code == 401 and "'short' expired at" in r.get_json()["error"]["message"]
    # an unknown token is a wrong token, as before
    assert _as(client, "sluice_" + "x" * 43)("get", "/models").status_code == 403


def test_scopes_and_roles_limit_what_a_token_does(client, issue):
    models_only = _as(client, issue("alice", scopes=["models", "tokens"])["token"])
    assert models_only("post", "/models", json={"name": "m"}).status_code == 201
    r = models_only("post", "/consumers", json={"name": "c"})
    assert r.status_code == 403
    err = r.get_json()["error"]
    assert err["type"] == "forbidden" and "needs the scope `consumers`" in err["message"]
    assert 'scope="consumers"' in r.headers["WWW-Authenticate"]
    r = models_only("get", "/consumers")
    assert r.status_code == 403 and "`read` or `consumers`" in r.get_json()["error"]["message"]
    # it cannot mint a wider token
    r = models_only("post", "/tokens", json={"name": "wider", "scopes": ["read"]})
    assert r.status_code == 403 and "within its own scopes" in r.get_json()["error"]["message"]
    assert models_only("post", "/tokens", json={"name": "same",
                                                "scopes": ["models"]}).status_code == 201
    r = models_only("post", "/tokens", json={"name": "unknown", "scopes": ["nonsense"]})
    assert r.status_code == 422 and "scopes" in r.get_json()["error"]["fields"]
    # a viewer's token reads, manages its own tokens, and changes nothing else
    victor = _as(client, issue("victor")["token"])
    assert victor("get", "/models").status_code == 200
    r = victor("post", "/models", json={"name": "v"})
    assert r.status_code == 403 and "role is viewer" in r.get_json()["error"]["message"]
    assert victor("post", "/tokens", json={"name": "own"}).status_code == 201


def test_the_bootstrap_token_can_be_turned_off(app, client, api, issue):
    alice = _as(client, issue("alice")["token"])
    app.config["SLUICE_SETTINGS"] = dataclasses.replace(
        app.config["SLUICE_SETTINGS"], admin_token_enabled=False)
    r = api("get", "/models")
    assert r.status_code == 401
    assert "SLUICE_ADMIN_TOKEN_ENABLED=false" in r.get_json()["error"]["message"]
    assert alice("get", "/models").status_code == 200


def _example_path(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


def test_a_read_token_is_refused_every_write_and_allowed_every_read(client, issue):
    """The security probe: every operation of the admin OpenAPI document, called with
    a `read`-scoped token of an admin user: every write is refused with 403 naming the
    scope it lacks, before anything runs; no read is refused for its scope."""
    reader = _as(client, issue("alice", scopes=["read"])["token"])
    refused, allowed = [], []
    for path, ops in document()["paths"].items():
        for method, op in ops.items():
            if method == "parameters" or op.get("security") is not None:
                continue   # the unauthenticated document, the gateway-token registration
            url = _example_path(path.removeprefix(API_PREFIX))
            r = reader(method, url, json={})
            if method == "get":
                allowed.append(url)
                assert r.status_code not in (401, 403), (method, url, r.get_json())
            else:
                refused.append(f"{method} {url}")
                assert r.status_code == 403, (method, url, r.status_code)
                kind = url.strip("/").split("/")[0]
                assert f"needs the scope `{kind}`" in r.get_json()["error"]["message"]
    assert len(refused) >= 30 and len(allowed) >= 30


def _csrf(resp) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', resp.get_data(as_text=True))
    assert match, resp.get_data(as_text=True)[:500]
    return match.group(1)


def _sign_in(client, username):
    token = _csrf(client.get("/admin/login"))
    r = client.post("/admin/login", data={"username": username,
                                          "password": "correct horse battery",
                                          "csrf_token": token})
    assert r.status_code == 302
    return _csrf(client.get("/admin/tokens"))


def test_the_ui_creates_shows_once_and_revokes_a_users_tokens(app, people):
    client = app.test_client()
    csrf = _sign_in(client, "victor")   # a viewer manages their own tokens too
    r = client.post("/admin/tokens", data={"csrf_token": csrf, "name": "notebook",
                                           "scopes": "read", "expires_at": "2099-12-31"})
    assert r.status_code == 201
    page = r.get_data(as_text=True)
    plain = re.search(r'id="new-token" class="mono" value="(sluice_[^"]+)"', page).group(1)
    assert "shown only this once" in page
    again = client.get("/admin/tokens").get_data(as_text=True)
    assert "notebook" in again and plain not in again and "2099-12-31" in again
    api_client = app.test_client()
    assert _as(api_client, plain)("get", "/models").status_code == 200
    r = client.post("/admin/tokens", data={"csrf_token": csrf, "name": "bad",
                                           "scopes": "read nonsense"})
    assert r.status_code == 422 and "unknown scope" in r.get_data(as_text=True)
    row_id = re.search(r'/admin/tokens/(\d+)/revoke', again).group(1)
    r = client.post(f"/admin/tokens/{row_id}/revoke", data={"csrf_token": csrf})
    assert r.status_code == 302
    assert _as(api_client, plain)("get", "/models").status_code == 401


def test_the_dashboard_flags_the_bootstrap_token_while_it_is_on(app, people):
    client = app.test_client()
    _sign_in(client, "alice")
    assert 'id="bootstrap-token-on"' in client.get("/admin/").get_data(as_text=True)
    app.config["SLUICE_SETTINGS"] = dataclasses.replace(
        app.config["SLUICE_SETTINGS"], admin_token_enabled=False)
    assert 'id="bootstrap-token-on"' not in client.get("/admin/").get_data(as_text=True)
