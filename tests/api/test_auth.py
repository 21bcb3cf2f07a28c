"""Every admin endpoint wants the admin token: 401 without it, 403 with a wrong one."""
from __future__ import annotations

import pytest


ENDPOINTS = [("get", "/config"), ("get", "/snapshot")] + [
    (method, path)
    for kind in ("models", "backends", "consumers", "keys", "gateways")
    for method, path in [("get", f"/{kind}"), ("post", f"/{kind}"),
                         ("get", f"/{kind}/1"), ("patch", f"/{kind}/1"),
                         ("delete", f"/{kind}/1")]
] + [("get", "/no-such-thing"), ("put", "/models/1")]


@pytest.fixture
def offline_client(offline_app):
    """Auth must answer before any query: this app's database does not exist."""
    return offline_app.test_client()


@pytest.mark.parametrize("method,path", ENDPOINTS)
@pytest.mark.parametrize("header", [None, "Basic dXNlcjpwdw==", "Bearer", "Bearer "])
def test_missing_token_is_401(method, path, header, offline_client):
    headers = {"Authorization": header} if header is not None else {}
    resp = offline_client.open(f"/api/v1{path}", method=method.upper(), headers=headers,
                       json={"name": "x"})
    assert resp.status_code == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    error = resp.get_json()["error"]
    assert error["type"] == "unauthorized" and error["code"] == 401


@pytest.mark.parametrize("method,path", ENDPOINTS)
def test_wrong_token_is_403(method, path, offline_client):
    resp = offline_client.open(f"/api/v1{path}", method=method.upper(),
                       headers={"Authorization": "Bearer test-admin-tokeN"},
                       json={"name": "x"})
    assert resp.status_code == 403
    assert resp.get_json()["error"]["type"] == "forbidden"


def test_scheme_is_case_insensitive(client):
    resp = client.get("/api/v1/config", headers={"Authorization": "bearer test-admin-token"})
    assert resp.status_code == 200


def test_rejected_write_changes_nothing(client, api):
    client.post("/api/v1/models", json={"name": "sneaky"},
                headers={"Authorization": "Bearer wrong"})
    assert api("get", "/models").get_json()["items"] == []
