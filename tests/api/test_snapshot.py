"""The snapshot holds exactly what was configured, enabled things only."""
from __future__ import annotations

import hashlib
import re


def snapshot(api):
    resp = api("get", "/snapshot")
    assert resp.status_code == 200
    return resp.get_json()


def test_empty_snapshot(api):
    snap = snapshot(api)
    assert snap["version"] == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", snap["generated_at"])
    assert (snap["models"], snap["consumers"], snap["keys"]) == ({}, {}, {})
    assert (snap["plans"], snap["jwt"]) == ({}, {})


def test_snapshot_matches_configuration(api, make):
    model = make("model", name="chat-demo", timeout_ms=30000)
    b1 = make("backend", name="openai-1", model_id=model["id"],
              url="http://localhost:9101", weight=250)
    b2 = make("backend", name="predict-1", model_id=model["id"],
              url="http://127.0.0.1:9102/base/", protocol="predict", weight=0)
    consumer = make("consumer", name="demo", allowed_models=["chat-demo"],
                    attributes={"user_type": "vip", "tier": 2})
    key = make("key", consumer_id=consumer["id"], expires_at=1893456000)

    snap = snapshot(api)
    assert snap["version"] == 6  # 1 + five writes
    assert snap["models"] == {"chat-demo": {
        "id": model["id"], "name": "chat-demo", "timeout_ms": 30000,
        "cache_ttl_s": 300, "cache_shared": False, "fallback_model": None, "mask_pii": False,
        "max_output_tokens": None,
        "backends": [
            {"id": b1["id"], "name": "openai-1", "protocol": "openai", "scheme": "http",
             "host": "127.0.0.1", "port": 9101, "host_header": "localhost:9101",
             "base_path": "", "weight": 250},
            {"id": b2["id"], "name": "predict-1", "protocol": "predict", "scheme": "http",
             "host": "127.0.0.1", "port": 9102, "host_header": "127.0.0.1:9102",
             "base_path": "/base", "weight": 0},
        ]}}
    assert snap["consumers"] == {str(consumer["id"]): {
        "id": consumer["id"], "name": "demo", "allowed_models": ["chat-demo"],
        "attributes": {"user_type": "vip", "tier": 2}, "plan_id": None}}
    digest = hashlib.sha256(key["key"].encode()).hexdigest()
    assert snap["keys"] == {digest: {"id": key["id"], "consumer_id": consumer["id"],
                                     "prefix": key["prefix"], "expires_at": 1893456000}}


def test_port_defaults_to_80(api, make):
    make("backend", url="http://127.0.0.1/v1")
    (backend,) = next(iter(snapshot(api)["models"].values()))["backends"]
    assert (backend["port"], backend["host_header"], backend["base_path"]) == (
        80, "127.0.0.1", "/v1")


def test_disabled_things_are_absent(api, make):
    on_model, off_model = make("model"), make("model", enabled=False)
    make("backend", model_id=off_model["id"])
    on_backend = make("backend", model_id=on_model["id"])
    make("backend", model_id=on_model["id"], enabled=False)
    on_consumer, off_consumer = make("consumer"), make("consumer", enabled=False)
    on_key = make("key", consumer_id=on_consumer["id"])
    make("key", consumer_id=on_consumer["id"], enabled=False)
    make("key", consumer_id=off_consumer["id"])  # enabled, but its consumer is not

    snap = snapshot(api)
    assert list(snap["models"]) == [on_model["name"]]
    assert [b["id"] for b in snap["models"][on_model["name"]]["backends"]] == [on_backend["id"]]
    assert list(snap["consumers"]) == [str(on_consumer["id"])]
    assert [k["id"] for k in snap["keys"].values()] == [on_key["id"]]


def test_unresolvable_backend_is_left_out(api, make):
    model = make("model")
    good = make("backend", model_id=model["id"])
    make("backend", model_id=model["id"], url="http://no-such-host.invalid:9000")
    backends = snapshot(api)["models"][model["name"]]["backends"]
    assert [b["id"] for b in backends] == [good["id"]]


def test_model_without_backends_is_present(api, make):
    model = make("model")
    assert snapshot(api)["models"][model["name"]]["backends"] == []
