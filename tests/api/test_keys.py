"""API keys: the full key is shown once, only its hash is stored."""
from __future__ import annotations

import hashlib

from sqlalchemy import text

from control_plane.db import make_engine


def _db_rows(db_url, sql):
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


def test_key_is_returned_once(api, make):
    created = make("key", name="laptop")
    key = created["key"]
    assert key.startswith("sk-") and len(key) >= 40
    assert created["prefix"] == key[:10]
    assert created["name"] == "laptop"

    for resp in (api("get", f"/keys/{created['id']}"), api("get", "/keys"),
                 api("patch", f"/keys/{created['id']}", json={"enabled": False})):
        assert resp.status_code == 200
        assert key not in resp.get_data(as_text=True)
        assert "key_hash" not in resp.get_data(as_text=True)
    shown = api("get", f"/keys/{created['id']}").get_json()
    assert "key" not in shown and shown["prefix"] == key[:10]


def test_only_the_hash_is_stored(db_url, make):
    key = make("key")["key"]
    rows = _db_rows(db_url, "SELECT * FROM api_keys")
    assert len(rows) == 1
    assert rows[0]["key_hash"] == hashlib.sha256(key.encode()).hexdigest()
    dump = _db_rows(db_url, "SELECT row_to_json(k)::text AS j FROM api_keys k")[0]["j"]
    assert key not in dump


def test_each_key_is_different(make):
    consumer = make("consumer")
    keys = {make("key", consumer_id=consumer["id"])["key"] for _ in range(3)}
    assert len(keys) == 3


def test_expiry_accepts_iso_or_unix_seconds(api, make):
    key = make("key", expires_at="2030-01-01T00:00:00Z")
    assert key["expires_at"] == "2030-01-01T00:00:00Z"
    resp = api("patch", f"/keys/{key['id']}", json={"expires_at": 1893456000})
    assert resp.get_json()["expires_at"] == "2030-01-01T00:00:00Z"
    resp = api("patch", f"/keys/{key['id']}", json={"expires_at": None})
    assert resp.get_json()["expires_at"] is None
    resp = api("patch", f"/keys/{key['id']}", json={"expires_at": "soon"})
    assert resp.status_code == 422


def test_key_cannot_change_hands_or_be_set(api, make):
    key = make("key")
    resp = api("patch", f"/keys/{key['id']}", json={"consumer_id": 1, "key": "sk-mine"})
    assert resp.status_code == 422
    assert resp.get_json()["error"]["fields"] == {"consumer_id": "is read-only",
                                                  "key": "is read-only"}
    resp = api("post", "/keys", json={"consumer_id": key["consumer_id"], "key": "sk-mine"})
    assert resp.status_code == 422


def test_keys_filter_by_consumer(api, make):
    mine = make("key")
    make("key")
    resp = api("get", f"/keys?consumer_id={mine['consumer_id']}")
    assert [k["id"] for k in resp.get_json()["items"]] == [mine["id"]]
