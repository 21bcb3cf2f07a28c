"""The audit trail: every admin change through the API, with before and after."""
from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from control_plane.db import make_engine


def test_create_update_delete_are_audited(api, make):
    model = make("model")
    r = api("patch", f"/models/{model['id']}", json={"timeout_ms": 1234},
            headers={"X-Sluice-Actor": "alice", "X-Request-Id": "audit-req-1"})
    assert r.status_code == 200
    api("patch", f"/models/{model['id']}", json={"timeout_ms": 1234})   # no change
    assert api("delete", f"/models/{model['id']}").status_code == 204

    r = api("get", f"/audit?resource=model&resource_id={model['id']}")
    assert r.status_code == 200
    items = r.get_json()["items"]
    assert [i["action"] for i in items] == ["delete", "update", "create"]
    delete, update, create = items
    assert create["before"] is None and create["after"]["name"] == model["name"]
    assert update["before"]["timeout_ms"] == 60000 and update["after"]["timeout_ms"] == 1234
    assert update["actor"] == "admin-token:alice" and update["request_id"] == "audit-req-1"
    assert create["actor"] == "admin-token"
    assert delete["before"]["timeout_ms"] == 1234 and delete["after"] is None
    assert api("get", "/audit?actor=admin-token:alice").get_json()["items"] == [update]


def test_key_hashes_never_reach_the_trail(api, make):
    key = make("key")
    [entry] = api("get", "/audit?resource=key").get_json()["items"]
    assert entry["after"]["key_hash"] == "[redacted]"
    assert key["key"] not in str(entry)


def test_failed_change_leaves_no_entry(api, make):
    model = make("model")
    make("backend", model_id=model["id"])
    assert api("delete", f"/models/{model['id']}").status_code == 409
    assert api("get", "/audit?action=delete").get_json()["items"] == []


def test_append_only(api, make, db_url):
    make("consumer")
    engine = make_engine(db_url)
    try:
        for sql in ("UPDATE audit_log SET actor = 'mallory'", "DELETE FROM audit_log",
                    "TRUNCATE audit_log"):
            with pytest.raises(DBAPIError, match="append-only"):
                with engine.begin() as conn:
                    conn.execute(text(sql))
    finally:
        engine.dispose()
    assert len(api("get", "/audit").get_json()["items"]) == 1


def test_bad_filters(api):
    r = api("get", "/audit?resource_id=x&colour=red")
    assert r.status_code == 422
    assert set(r.get_json()["error"]["fields"]) == {"resource_id", "colour"}


def test_backend_credentials_never_reach_the_trail(api, make):
    backend = make("backend", auth_header="Bearer backend-secret-123")
    api("patch", f"/backends/{backend['id']}", json={"auth_header": None})
    entries = api("get", "/audit?resource=backend").get_json()["items"]
    assert "backend-secret-123" not in str(entries)
    update, create = entries
    assert create["after"]["auth_header"] == "[redacted]"
    assert update["before"]["auth_header"] == "[redacted]" and update["after"]["auth_header"] is None
