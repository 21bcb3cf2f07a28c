"""The admin UI's audit trail and inference log pages (Flask test client)."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import admin_users
from control_plane.tables.records import InferenceLog

PASSWORD = "correct horse battery"


def _csrf(resp) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', resp.get_data(as_text=True)).group(1)


def _login(client, username):
    token = _csrf(client.get("/admin/login"))
    return client.post("/admin/login", data={"username": username, "password": PASSWORD,
                                             "csrf_token": token})


@pytest.fixture
def signed_in(client, db_url):
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        admin_users.create_user(session, "alice", PASSWORD, "admin")
        admin_users.create_user(session, "victor", PASSWORD, "viewer")
    engine.dispose()
    assert _login(client, "alice").status_code == 302
    client.csrf = _csrf(client.get("/admin/"))
    return client


def test_audit_page_shows_who_changed_what(signed_in, api):
    client = signed_in
    client.post("/admin/models/new", data={"csrf_token": client.csrf, "name": "m-audit",
                                           "timeout_ms": "1000", "enabled": "on"})
    [model] = api("get", "/models").get_json()["items"]
    client.post(f"/admin/models/{model['id']}", data={"csrf_token": client.csrf,
                                                      "name": "m-audit",
                                                      "timeout_ms": "2500"})
    html = client.get("/admin/audit/").get_data(as_text=True)
    assert html.count("ui:alice") == 2
    assert "<del>1000</del> → <ins>2500</ins>" in html   # the update, field by field
    assert "<del>true</del> → <ins>false</ins>" in html  # enabled unticked
    only_creates = client.get("/admin/audit/?action=create&resource=model")
    assert "<del>1000</del>" not in only_creates.get_data(as_text=True)


def test_audit_filters_report_bad_values_per_field(signed_in):
    resp = signed_in.get("/admin/audit/?since=yesterday-ish")
    assert resp.status_code == 200
    assert "Since must be ISO 8601" in resp.get_data(as_text=True)


def test_viewer_may_read_the_audit_trail(client, db_url, signed_in):
    client.post("/admin/logout", data={"csrf_token": client.csrf})
    assert _login(client, "victor").status_code == 302
    assert client.get("/admin/audit/").status_code == 200


def test_log_page_searches_and_sums_up_the_last_hour(signed_in, db_url):
    now = datetime.now(timezone.utc)
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        for i in range(1, 21):
            session.add(InferenceLog(ts=now - timedelta(seconds=i), gateway="gw1",
                                     request_id=f"req-{i}", consumer="team-a",
                                     model_name="chat-demo", backend="chat-a",
                                     status=502 if i == 7 else 200, latency=i * 10,
                                     prompt_tokens=3, completion_tokens=5))
        session.commit()
    engine.dispose()
    html = signed_in.get("/admin/logs/").get_data(as_text=True)
    assert "req-1<" in html and "req-20<" in html
    assert "5.00 %" in html  # one 5xx in twenty, in the last-hour table
    found = signed_in.get("/admin/logs/?status=502").get_data(as_text=True)
    assert "req-7<" in found and "req-1<" not in found
    bad = signed_in.get("/admin/logs/?status=abc").get_data(as_text=True)
    assert "Status must be an integer" in bad
