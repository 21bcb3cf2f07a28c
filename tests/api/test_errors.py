"""Errors come in the template of docs/contracts.md and never leak internals."""
from __future__ import annotations

import pytest


def test_request_id_is_kept_or_made(api):
    resp = api("get", "/models/12345", headers={"X-Request-Id": "abc-123"})
    assert resp.get_json()["error"]["request_id"] == "abc-123"
    assert resp.headers["X-Request-Id"] == "abc-123"

    resp = api("get", "/models/12345", headers={"X-Request-Id": "bad id!"})
    rid = resp.get_json()["error"]["request_id"]
    assert rid != "bad id!" and resp.headers["X-Request-Id"] == rid

    ok = api("get", "/models")
    assert ok.headers["X-Request-Id"]


def test_unknown_route_is_json_404(api, client):
    resp = api("get", "/nothing-here")
    assert resp.status_code == 404
    assert resp.get_json()["error"] == {"code": 404, "type": "not_found",
                                        "message": "no such endpoint",
                                        "request_id": resp.headers["X-Request-Id"]}
    assert client.get("/elsewhere").get_json()["error"]["type"] == "not_found"


@pytest.mark.parametrize("method,path", [("put", "/models/1"), ("post", "/models/1"),
                                         ("delete", "/models"), ("post", "/config")])
def test_wrong_method_is_405(method, path, offline_api):
    resp = offline_api(method, path, json={})
    assert resp.status_code == 405
    assert resp.get_json()["error"]["type"] == "method_not_allowed"
    assert "GET" in resp.headers["Allow"]


def test_body_too_large_is_413(offline_api):
    resp = offline_api("post", "/models", data=b'{"name": "' + b"x" * (2 << 20) + b'"}')
    assert resp.status_code == 413
    assert resp.get_json()["error"]["type"] == "payload_too_large"


def test_internal_error_hides_details(app, api, monkeypatch):
    from control_plane.services import resources

    def boom(*args, **kwargs):
        raise RuntimeError("secret connection string postgres://x:y@z")

    monkeypatch.setattr(resources.MODELS, "list", boom)
    resp = api("get", "/models", headers={"X-Request-Id": "trace-me"})
    assert resp.status_code == 500
    body = resp.get_data(as_text=True)
    assert "secret" not in body and "Traceback" not in body
    assert resp.get_json()["error"] == {
        "code": 500, "type": "internal_error",
        "message": "internal error; quote the request_id when reporting it",
        "request_id": "trace-me"}
