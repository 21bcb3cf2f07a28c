"""422 with field-level messages for bodies an operator gets wrong; 400 for non-JSON."""
from __future__ import annotations

import pytest

from control_plane.tables.config import PROTOCOLS


def _fields(resp):
    assert resp.status_code == 422, resp.get_json()
    error = resp.get_json()["error"]
    assert error["type"] == "validation_error" and error["code"] == 422
    assert error["request_id"]
    return error["fields"]


@pytest.mark.parametrize("kind,required", [
    ("models", {"name"}),
    # url and protocol: required without a preset (tests/api/test_presets.py)
    ("backends", {"name", "model_id"}),
    ("consumers", {"name"}),
    ("keys", {"consumer_id"}),
    ("gateways", {"name", "internal_url"}),
])
def test_missing_fields(kind, required, offline_api):
    fields = _fields(offline_api("post", f"/{kind}", json={}))
    assert fields == {f: "is required" for f in required}


def test_backend_field_messages(api, make):
    model = make("model")
    fields = _fields(api("post", "/backends", json={
        "name": "-bad", "model_id": model["id"], "url": "ftp://x:1",
        "protocol": "grpc", "weight": 1001, "enabled": "yes", "colour": "red"}))
    assert fields == {
        "name": "must be 1-128 characters of letters, digits and . _ : / -, "
                "starting with a letter or digit",
        "url": "must be a URL of the form http[s]://host:port[/base]",
        "protocol": "must be one of: " + ", ".join(PROTOCOLS),
        "weight": "must be an integer between 0 and 1000",
        "enabled": "must be true or false",
        "colour": "is not a known field",
    }


@pytest.mark.parametrize("weight", [-1, 1001, 1.5, "100", True, None])
def test_weight_must_be_an_integer_in_range(weight, offline_api):
    fields = _fields(offline_api("patch", "/backends/1", json={"weight": weight}))
    assert set(fields) == {"weight"}


@pytest.mark.parametrize("url", ["http://", "127.0.0.1:9000", "http://h:99999",
                                 "http://user:pw@h:1", "http://h:1/?q=1", "ftp://h:1",
                                 "http://bad_host:1", "http://h:1#frag", 42])
def test_bad_urls(url, offline_api):
    fields = _fields(offline_api("post", "/backends", json={
        "name": "b", "model_id": 1, "url": url, "protocol": "openai"}))
    assert set(fields) == {"url"}


@pytest.mark.parametrize("name", ["", "-x", "a b", "x" * 129, "é", 5])
def test_bad_names(name, offline_api):
    assert set(_fields(offline_api("post", "/models", json={"name": name}))) == {"name"}


def test_model_names_allow_slashes_and_colons(make):
    assert make("model", name="meta/llama-3.1:8b")["name"] == "meta/llama-3.1:8b"


def test_backend_for_missing_model(api):
    fields = _fields(api("post", "/backends", json={
        "name": "b", "model_id": 4242, "url": "http://h:1", "protocol": "openai"}))
    assert fields == {"model_id": "no model with id 4242"}


def test_key_for_missing_consumer(api):
    assert _fields(api("post", "/keys", json={"consumer_id": 77})) == {
        "consumer_id": "no consumer with id 77"}


def test_allowed_models_shape(api):
    fields = _fields(api("post", "/consumers", json={"name": "c", "allowed_models": "all"}))
    assert fields == {"allowed_models": "must be null (every model) or a list of model names"}


def test_read_only_fields(api, make):
    model = make("model")
    fields = _fields(api("patch", f"/models/{model['id']}", json={"id": 3, "created_at": 0}))
    assert fields == {"id": "is read-only", "created_at": "is read-only"}


def test_null_for_a_required_value(api, make):
    model = make("model")
    assert _fields(api("patch", f"/models/{model['id']}", json={"name": None})) == {
        "name": "must not be null"}


@pytest.mark.parametrize("body", [b"{nope", b"", b"\xff\xfe", b"[1, 2]", b'"name"'])
def test_bodies_that_are_not_json_objects_are_400(body, offline_api):
    resp = offline_api("post", "/models", data=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 400
    error = resp.get_json()["error"]
    assert error["type"] == "invalid_request"
    assert "JSON" in error["message"]


def test_json_without_content_type_is_accepted(api):
    resp = api("post", "/models", data=b'{"name": "plain"}')
    assert resp.status_code == 201


def test_consumer_attributes_must_be_flat_scalars(api):
    for bad in ([], {"a": {"nested": 1}}, {"bad key": 1}, {"a": [1]}, "vip"):
        resp = api("post", "/consumers", json={"name": "c", "attributes": bad})
        assert resp.status_code == 422, bad
        assert "attributes" in resp.get_json()["error"]["fields"]
    ok = api("post", "/consumers", json={"name": "c", "attributes": {"user_type": "vip"}})
    assert ok.status_code == 201
    assert ok.get_json()["attributes"] == {"user_type": "vip"}
