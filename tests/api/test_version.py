"""Every config write bumps the config version; failed writes and reads do not."""
from __future__ import annotations

import pytest


def version(api):
    resp = api("get", "/config")
    assert resp.status_code == 200
    return resp.get_json()["version"]


def test_fresh_database_is_at_version_1(api):
    assert version(api) == 1


@pytest.mark.parametrize("kind,patch", [("model", {"enabled": False}),
                                        ("backend", {"weight": 0}),
                                        ("consumer", {"enabled": False}),
                                        ("key", {"enabled": False})])
def test_create_update_delete_each_bump(kind, patch, api, make):
    obj = make(kind)
    after_create = version(api)
    assert api("patch", f"/{kind}s/{obj['id']}", json=patch).status_code == 200
    assert version(api) == after_create + 1
    assert api("delete", f"/{kind}s/{obj['id']}").status_code == 204
    assert version(api) == after_create + 2


def test_one_bump_per_write(api, make):
    make("model")
    assert version(api) == 2
    make("consumer")
    assert version(api) == 3


def test_failed_writes_do_not_bump(api, make):
    model = make("model")
    make("backend", model_id=model["id"])
    before = version(api)
    assert api("post", "/models", json={"name": model["name"]}).status_code == 409
    assert api("post", "/models", json={"name": ""}).status_code == 422
    assert api("delete", f"/models/{model['id']}").status_code == 409
    assert api("patch", "/models/999", json={"enabled": False}).status_code == 404
    assert api("post", "/backends", json={"name": "x", "model_id": 999,
                                          "url": "http://h:1", "protocol": "openai"}
               ).status_code == 422
    assert version(api) == before


def test_noop_patch_and_reads_do_not_bump(api, make):
    model = make("model")
    before = version(api)
    assert api("patch", f"/models/{model['id']}", json={"name": model["name"]}
               ).status_code == 200
    api("get", "/models")
    api("get", "/snapshot")
    assert version(api) == before


def test_gateway_writes_do_not_bump(api, make):
    gateway = make("gateway")
    api("patch", f"/gateways/{gateway['id']}", json={"name": "renamed"})
    api("delete", f"/gateways/{gateway['id']}")
    assert version(api) == 1
