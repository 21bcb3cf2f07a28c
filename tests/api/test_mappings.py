"""Vendor mappings through the admin API: validation, vendor backends need one, the
snapshot carries them."""
from __future__ import annotations

import pytest


def test_vendor_backend_needs_a_mapping(api, make):
    model = make("model")
    body = {"name": "v", "model_id": model["id"], "url": "http://127.0.0.1:9", "protocol":
            "vendor"}
    resp = api("post", "/backends", json=body)
    assert resp.status_code == 422
    assert "mapping_id" in resp.get_json()["error"]["fields"]

    resp = api("post", "/backends", json={**body, "mapping_id": 999})
    assert resp.status_code == 422
    assert resp.get_json()["error"]["fields"]["mapping_id"] == "no mapping with id 999"

    mapping = make("mapping")
    backend = make("backend", model_id=model["id"], protocol="vendor",
                   mapping_id=mapping["id"])
    assert backend["mapping_id"] == mapping["id"]

    # a non-vendor backend has no mapping; switching protocol must drop it
    resp = api("patch", f"/backends/{backend['id']}", json={"protocol": "openai"})
    assert resp.status_code == 422
    resp = api("patch", f"/backends/{backend['id']}",
               json={"protocol": "openai", "mapping_id": None})
    assert resp.status_code == 200 and resp.get_json()["mapping_id"] is None

    resp = api("post", "/backends", json={**body, "protocol": "openai", "name": "w",
                                          "mapping_id": mapping["id"]})
    assert resp.status_code == 422


def test_mapping_in_use_cannot_be_deleted(api, make):
    mapping = make("mapping")
    make("backend", protocol="vendor", mapping_id=mapping["id"])
    resp = api("delete", f"/mappings/{mapping['id']}")
    assert resp.status_code == 409
    assert "used by 1 backend" in resp.get_json()["error"]["message"]


@pytest.mark.parametrize("field, value", [
    ("path", "generate"),
    ("path", "/gen erate"),
    ("path", "/x?y=1"),
    ("request", ["not", "an", "object"]),
    ("response", {"error": "/msg"}),
    ("response", {"output": "result/text"}),
    ("response", {"output": "/a", "extra": "/b"}),
    ("response", {"output": "/a~2b"}),
])
def test_mapping_validation(api, field, value):
    body = {"name": "m", "path": "/generate", "request": {"text": "{{input}}"},
            "response": {"output": "/result/text", "error": "/err/msg"}, field: value}
    resp = api("post", "/mappings", json=body)
    assert resp.status_code == 422, resp.get_json()
    assert list(resp.get_json()["error"]["fields"]) == [field]


def test_snapshot_carries_mappings_and_backend_mapping_names(api, make):
    mapping = make("mapping", name="vendor-b", path="/api/infer",
                   request={"content": "{{input}}", "lang": "cn"},
                   response={"output": "/data/answer", "error": "/msg"})
    backend = make("backend", protocol="vendor", mapping_id=mapping["id"])
    snap = api("get", "/snapshot").get_json()
    assert snap["mappings"] == {"vendor-b": {
        "path": "/api/infer", "request": {"content": "{{input}}", "lang": "cn"},
        "response": {"output": "/data/answer", "error": "/msg"}}}
    (entry,) = [b for m in snap["models"].values() for b in m["backends"]]
    assert entry["id"] == backend["id"] and entry["mapping"] == "vendor-b"
    assert entry["protocol"] == "vendor"
