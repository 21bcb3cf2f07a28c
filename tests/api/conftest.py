"""Fixtures for the admin API tests: app, client, auth, and shorthands.

`db_url` (a fresh database at the Alembic head) comes from tests/conftest.py.
"""
from __future__ import annotations

import pytest

from control_plane.app import create_app, dispose

ADMIN_TOKEN = "test-admin-token"


@pytest.fixture
def app(db_url):
    app = create_app({"DATABASE_URL": db_url, "ADMIN_TOKEN": ADMIN_TOKEN, "TESTING": True})
    yield app
    dispose(app)


@pytest.fixture(scope="session")
def offline_app():
    """An app whose database does not exist, for requests that must be answered
    before any query (auth, body and field validation, routing)."""
    app = create_app({"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
                      "ADMIN_TOKEN": ADMIN_TOKEN, "TESTING": True})
    yield app
    dispose(app)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def auth():
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _caller(client, auth):
    def call(method: str, path: str, **kwargs):
        headers = {**auth, **kwargs.pop("headers", {})}
        return client.open(f"/api/v1{path}", method=method.upper(), headers=headers,
                           **kwargs)
    return call


@pytest.fixture
def api(client, auth):
    """Call the admin API as an operator: api("post", "/models", json={...})."""
    return _caller(client, auth)


@pytest.fixture
def offline_api(offline_app, auth):
    """Like `api`, against `offline_app`: any database access fails the request."""
    return _caller(offline_app.test_client(), auth)


@pytest.fixture
def make(api):
    """Create resources tersely; returns the created JSON or fails the test."""
    counter = iter(range(1, 10_000))

    def create(kind: str, **fields):
        n = next(counter)
        if kind == "model":
            body = {"name": f"model-{n}", **fields}
        elif kind == "backend":
            model_id = fields.pop("model_id", None) or create("model")["id"]
            body = {"name": f"backend-{n}", "model_id": model_id,
                    "url": f"http://127.0.0.1:{9100 + n}", "protocol": "openai", **fields}
        elif kind == "consumer":
            body = {"name": f"consumer-{n}", **fields}
        elif kind == "key":
            consumer_id = fields.pop("consumer_id", None) or create("consumer")["id"]
            body = {"consumer_id": consumer_id, **fields}
        elif kind in ("plan", "jwt-issuer", "content-policy"):
            body = {"name": f"{kind}-{n}", **fields}
        elif kind == "mapping":
            body = {"name": f"vendor-{n}", "path": "/generate",
                    "request": {"text": "{{input}}"},
                    "response": {"output": "/result/text"}, **fields}
        elif kind == "gateway":
            body = {"name": f"gw-{n}", "internal_url": f"http://127.0.0.1:{9180 + n}",
                    **fields}
        else:
            raise ValueError(kind)
        path = "/content-policies" if kind == "content-policy" else f"/{kind}s"
        resp = api("post", path, json=body)
        assert resp.status_code == 201, resp.get_json()
        return resp.get_json()
    return create
