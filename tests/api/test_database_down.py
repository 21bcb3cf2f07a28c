"""The admin API and UI while their PostgreSQL is down, and after it comes back.

Each test runs its own private cluster (runtime/postgres.Cluster) so it can stop and
start it without disturbing the shared test server.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest
from waiting import eventually

from control_plane.app import create_app, dispose
from control_plane.db import make_engine, make_sessionmaker
from control_plane.runtime import migrate
from control_plane.runtime import postgres
from control_plane.services import admin_users

ADMIN_TOKEN = "test-admin-token"
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PASSWORD = "correct horse battery"


@pytest.fixture
def cluster():
    top = Path(tempfile.mkdtemp(prefix="sluice-db-down-"))
    top.chmod(0o755)  # under root the cluster runs as the postgres user
    cluster = postgres.Cluster(top / "data")
    cluster.init()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def app(cluster):
    url = cluster.create_database("sluice")
    migrate.upgrade(url)
    engine = make_engine(url)
    with make_sessionmaker(engine)() as session:
        admin_users.create_user(session, "alice", PASSWORD, "admin")
    engine.dispose()
    app = create_app({"DATABASE_URL": url, "ADMIN_TOKEN": ADMIN_TOKEN, "TESTING": True})
    yield app
    dispose(app)


def _unavailable(resp, cluster) -> dict:
    """A 503 database_unavailable in the API's error format, with Retry-After."""
    assert resp.status_code == 503, resp.get_data(as_text=True)
    assert resp.headers["Retry-After"] == "5"
    error = resp.get_json()["error"]
    assert error["code"] == 503 and error["type"] == "database_unavailable"
    assert error["retry_after"] == 5 and error["request_id"]
    text = resp.get_data(as_text=True)
    for secret in (cluster.password, str(cluster.port), "postgresql://", "127.0.0.1"):
        assert secret not in text
    return error


def test_api_answers_503_while_the_database_is_down_and_recovers(app, cluster, caplog):
    client = app.test_client()
    assert client.get("/api/v1/models", headers=AUTH).status_code == 200
    assert client.get("/readyz").get_json() == {"status": "ready", "database": "ok"}

    cluster.stop()
    error = _unavailable(client.get("/api/v1/models", headers=AUTH), cluster)
    assert "database" in error["message"]
    _unavailable(client.post("/api/v1/models", headers=AUTH, json={"name": "m"}), cluster)
    _unavailable(client.get("/api/v1/config", headers=AUTH), cluster)
    _unavailable(client.get("/readyz"), cluster)
    # what needs no database still answers as before
    assert client.get("/healthz").status_code == 200
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.get("/api/v1/models").status_code == 401
    assert client.get("/api/v1/models", headers={"Authorization": "Bearer no"}).status_code \
        == 403
    assert cluster.password not in caplog.text
    assert "internal_error" not in caplog.text

    cluster.start()
    eventually(lambda: client.get("/api/v1/models", headers=AUTH).status_code == 200,
               timeout=20, message="the API answers again once PostgreSQL is back")
    created = client.post("/api/v1/models", headers=AUTH, json={"name": "after-outage"})
    assert created.status_code == 201, created.get_json()
    assert client.get("/readyz").status_code == 200


def _csrf(resp) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', resp.get_data(as_text=True))[1]


def test_admin_ui_shows_a_readable_page_while_the_database_is_down(app, cluster):
    client = app.test_client()
    signed_in = client.post("/admin/login", data={
        "username": "alice", "password": PASSWORD,
        "csrf_token": _csrf(client.get("/admin/login"))})
    assert signed_in.status_code == 302

    cluster.stop()
    for resp in (client.get("/admin/"), client.get("/admin/models/")):
        assert resp.status_code == 503
        assert resp.headers["Retry-After"] == "5"
        page = resp.get_data(as_text=True)
        assert "Database unavailable" in page and "cannot reach its database" in page
        assert "Internal error" not in page and cluster.password not in page
    # signing in needs the database too: the same page, not a 500
    fresh = app.test_client()
    resp = fresh.post("/admin/login", data={
        "username": "alice", "password": PASSWORD,
        "csrf_token": _csrf(fresh.get("/admin/login"))})
    assert resp.status_code == 503 and "Database unavailable" in resp.get_data(as_text=True)

    cluster.start()
    page = eventually(lambda: (r := client.get("/admin/")).status_code == 200 and r,
                      timeout=20, message="the dashboard shows again")
    assert "Dashboard" in page.get_data(as_text=True)
