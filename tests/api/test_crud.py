"""Create, read, update, delete for every resource, as an operator sees it."""
from __future__ import annotations

import pytest

# kind → (a field PATCH changes, its new value)
PATCHES = {
    "model": ("timeout_ms", 1234),
    "backend": ("weight", 7),
    "consumer": ("allowed_models", ["chat-demo"]),
    "key": ("name", "ci"),
    "gateway": ("internal_url", "http://10.0.0.9:9180"),
    "mapping": ("request", {"content": "{{input}}", "lang": "cn"}),
}


@pytest.mark.parametrize("kind", PATCHES)
def test_lifecycle(kind, api, make):
    created = make(kind)
    rid = created["id"]
    assert isinstance(rid, int)
    assert created["created_at"].endswith("Z")

    got = api("get", f"/{kind}s/{rid}")
    assert got.status_code == 200
    expected = {k: v for k, v in created.items() if k != "key"}
    assert got.get_json() == expected

    listed = api("get", f"/{kind}s")
    assert listed.status_code == 200
    assert [r["id"] for r in listed.get_json()["items"]] == [rid]

    field, value = PATCHES[kind]
    patched = api("patch", f"/{kind}s/{rid}", json={field: value})
    assert patched.status_code == 200
    assert patched.get_json()[field] == value
    assert api("get", f"/{kind}s/{rid}").get_json()[field] == value

    deleted = api("delete", f"/{kind}s/{rid}")
    assert deleted.status_code == 204
    assert deleted.data == b""
    assert api("get", f"/{kind}s/{rid}").status_code == 404
    assert api("get", f"/{kind}s").get_json()["items"] == []


@pytest.mark.parametrize("kind", PATCHES)
@pytest.mark.parametrize("method", ["get", "patch", "delete"])
def test_unknown_id_is_404(kind, method, api):
    resp = api(method, f"/{kind}s/999", json={})
    assert resp.status_code == 404
    error = resp.get_json()["error"]
    assert error["type"] == "not_found"
    assert error["message"] == f"no {kind} with id 999"


@pytest.mark.parametrize("kind,field", [("model", "name"), ("backend", "name"),
                                        ("consumer", "name"), ("gateway", "name"),
                                        ("gateway", "internal_url")])
def test_duplicate_is_409(kind, field, api, make):
    first = make(kind)
    body = {k: v for k, v in first.items()
            if k in ("model_id", "url", "protocol", "internal_url")}
    body["name"] = "fresh-name"
    if kind == "gateway":
        body["internal_url"] = "http://127.0.0.1:1"
    body[field] = first[field]
    resp = api("post", f"/{kind}s", json=body)
    assert resp.status_code == 409
    error = resp.get_json()["error"]
    assert error["type"] == "conflict"
    assert repr(first[field]) in error["message"]


def test_rename_onto_existing_name_is_409(api, make):
    a, b = make("model"), make("model")
    resp = api("patch", f"/models/{b['id']}", json={"name": a["name"]})
    assert resp.status_code == 409
    assert api("get", f"/models/{b['id']}").get_json()["name"] == b["name"]


def test_model_with_backends_cannot_be_deleted(api, make):
    backend = make("backend")
    resp = api("delete", f"/models/{backend['model_id']}")
    assert resp.status_code == 409
    assert "still has 1 backend" in resp.get_json()["error"]["message"]
    assert api("delete", f"/backends/{backend['id']}").status_code == 204
    assert api("delete", f"/models/{backend['model_id']}").status_code == 204


def test_deleting_a_consumer_deletes_its_keys(api, make):
    key = make("key")
    assert api("delete", f"/consumers/{key['consumer_id']}").status_code == 204
    assert api("get", f"/keys/{key['id']}").status_code == 404


def test_defaults(make):
    model = make("model")
    assert model["timeout_ms"] == 60000 and model["enabled"] is True
    backend = make("backend")
    assert backend["weight"] == 100 and backend["enabled"] is True
    assert make("consumer")["allowed_models"] is None


def test_backend_url_is_normalised(make):
    backend = make("backend", url="http://LocalHost:9101/v1/")
    assert backend["url"] == "http://localhost:9101/v1"


def test_lists_filter_by_parent(api, make):
    model = make("model")
    mine = make("backend", model_id=model["id"])
    make("backend")
    resp = api("get", f"/backends?model_id={model['id']}")
    assert [b["id"] for b in resp.get_json()["items"]] == [mine["id"]]
    resp = api("get", "/backends?model_id=abc")
    assert resp.status_code == 422
    assert "model_id" in resp.get_json()["error"]["fields"]


def test_gateway_push_state_is_read_only(api, make):
    gateway = make("gateway")
    assert gateway["acked_version"] is None and gateway["last_error"] is None
    resp = api("patch", f"/gateways/{gateway['id']}", json={"acked_version": 5})
    assert resp.status_code == 422
    assert resp.get_json()["error"]["fields"] == {"acked_version": "is read-only"}
