"""Per-model response cache settings: defaults, validation, snapshot."""
from __future__ import annotations


def test_defaults_and_snapshot(api, make):
    model = make("model")
    assert model["cache_ttl_s"] == 300 and model["cache_shared"] is False
    resp = api("patch", f"/models/{model['id']}", json={"cache_ttl_s": 0,
                                                        "cache_shared": True})
    assert resp.status_code == 200
    snap = api("get", "/snapshot").get_json()
    entry = snap["models"][model["name"]]
    assert entry["cache_ttl_s"] == 0 and entry["cache_shared"] is True


def test_invalid_settings(api):
    resp = api("post", "/models", json={"name": "m", "cache_ttl_s": -1,
                                        "cache_shared": "yes"})
    assert resp.status_code == 422
    assert set(resp.get_json()["error"]["fields"]) == {"cache_ttl_s", "cache_shared"}
