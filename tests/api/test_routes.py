"""/api/v1/routes: a route and its versions written together, validated field by
field, audited, bumping the config version; the snapshot's "routes" section."""
from __future__ import annotations

import pytest


def version(api) -> int:
    return api("get", "/config").get_json()["version"]


@pytest.fixture
def models(make):
    return make("model", name="chat-stable"), make("model", name="chat-canary")


def canary_body(**over):
    body = {"name": "chat", "versions": [
        {"model": "chat-canary", "conditions": {"user_type": "vip"}},
        {"model": "chat-stable", "percent": 90},
        {"model": "chat-canary", "percent": 10}]}
    body.update(over)
    return body


def test_lifecycle_with_audit_and_version_bumps(api, models):
    stable, canary = models
    before = version(api)
    r = api("post", "/routes", json=canary_body(), headers={"X-Sluice-Actor": "ops"})
    assert r.status_code == 201, r.get_json()
    route = r.get_json()
    assert route["sticky"] is True and route["enabled"] is True
    assert route["versions"] == [
        {"model": "chat-canary", "model_id": canary["id"], "percent": 100,
         "conditions": [{"attr": "user_type", "op": "eq", "value": "vip"}]},
        {"model": "chat-stable", "model_id": stable["id"], "percent": 90, "conditions": []},
        {"model": "chat-canary", "model_id": canary["id"], "percent": 10, "conditions": []}]
    assert version(api) == before + 1
    assert api("get", f"/routes/{route['id']}").get_json() == route
    assert api("get", "/routes").get_json()["items"] == [route]

    # widen the canary to half of everyone
    r = api("patch", f"/routes/{route['id']}", json={"versions": [
        {"model": "chat-stable", "percent": 50}, {"model": "chat-canary", "percent": 50}]})
    assert r.status_code == 200, r.get_json()
    assert [v["percent"] for v in r.get_json()["versions"]] == [50, 50]
    assert version(api) == before + 2
    # the same versions again change nothing
    api("patch", f"/routes/{route['id']}", json={"versions": [
        {"model": "chat-stable", "percent": 50}, {"model": "chat-canary", "percent": 50}]})
    assert version(api) == before + 2

    assert api("delete", f"/routes/{route['id']}").status_code == 204
    assert api("get", f"/routes/{route['id']}").status_code == 404
    assert version(api) == before + 3

    items = api("get", f"/audit?resource=route&resource_id={route['id']}").get_json()["items"]
    assert [i["action"] for i in items] == ["delete", "update", "create"]
    delete, update, create = items
    assert create["actor"] == "admin-token:ops"
    assert [v["percent"] for v in create["after"]["versions"]] == [100, 90, 10]
    assert create["after"]["versions"][0]["model"] == "chat-canary"
    assert [v["percent"] for v in update["before"]["versions"]] == [100, 90, 10]
    assert [v["percent"] for v in update["after"]["versions"]] == [50, 50]
    assert delete["after"] is None and delete["before"]["name"] == "chat"


@pytest.mark.parametrize("versions,field,words", [
    ([{"model": "chat-stable", "percent": 90}, {"model": "chat-canary", "percent": 5}],
     "versions", "add up to 95"),
    ([{"model": "chat-stable", "percent": 100}, {"model": "nope", "percent": 0}],
     "versions", "[1].model 'nope' is not a model"),
    ([{"model": "chat-stable", "percent": 100},
      {"model": "chat-canary", "conditions": [{"attr": "tier", "op": "gt", "value": 1}]}],
     "versions", "[1].conditions[0].op must be one of: eq, ne, in"),
    ([{"model": "chat-stable", "percent": 100},
      {"model": "chat-canary", "conditions": [{"attr": "tier", "op": "in", "value": "a"}]}],
     "versions", "[1].conditions[0].value must be a list"),
    ([{"model": "chat-stable", "percent": 101}], "versions", "[0].percent must be"),
    ([{"model": "chat-stable"}], "versions", "[0].percent must be"),
    ([], "versions", "1 to 32 versions"),
    ([{"model": "chat-stable", "percent": 100, "weight": 3}], "versions", "[0] must be"),
])
def test_invalid_versions_name_the_field(api, models, versions, field, words):
    before = version(api)
    r = api("post", "/routes", json={"name": "chat", "versions": versions})
    assert r.status_code == 422, r.get_json()
    err = r.get_json()["error"]
    assert err["type"] == "validation_error"
    assert words in err["fields"][field]
    assert api("get", "/routes").get_json()["items"] == []
    assert version(api) == before
    assert api("get", "/audit?resource=route").get_json()["items"] == []


def test_patch_is_validated_too(api, models):
    route = api("post", "/routes", json=canary_body()).get_json()
    r = api("patch", f"/routes/{route['id']}",
            json={"versions": [{"model": "chat-stable", "percent": 40}]})
    assert r.status_code == 422 and "add up to 40" in r.get_json()["error"]["fields"]["versions"]
    assert api("get", f"/routes/{route['id']}").get_json() == route


def test_duplicate_name_is_409_and_routes_need_auth(api, client, models):
    assert api("post", "/routes", json=canary_body()).status_code == 201
    assert api("post", "/routes", json=canary_body()).status_code == 409
    assert client.get("/api/v1/routes").status_code == 401
    assert client.post("/api/v1/routes", json=canary_body()).status_code == 401


def test_a_routed_model_cannot_be_deleted(api, models):
    stable, _ = models
    api("post", "/routes", json=canary_body())
    r = api("delete", f"/models/{stable['id']}")
    assert r.status_code == 409
    assert api("get", f"/models/{stable['id']}").status_code == 200


def test_snapshot_section(api, models):
    stable, canary = models
    api("post", "/routes", json=canary_body())
    off = api("post", "/routes", json=canary_body(name="off", enabled=False)).get_json()
    api("post", "/routes", json=canary_body(name="only-canary", sticky=False, versions=[
        {"model": "chat-canary", "percent": 100}]))
    snap = api("get", "/snapshot").get_json()
    assert snap["routes"]["chat"]["sticky"] is True
    assert snap["routes"]["chat"]["versions"] == [
        {"model": "chat-canary", "percent": 100,
         "conditions": [{"attr": "user_type", "op": "eq", "value": "vip"}]},
        {"model": "chat-stable", "percent": 90}, {"model": "chat-canary", "percent": 10}]
    assert off["name"] not in snap["routes"]
    assert snap["routes"]["only-canary"]["sticky"] is False

    # a disabled model leaves the route; its share goes to the other versions, and
    # a route with nothing left is left out
    api("patch", f"/models/{canary['id']}", json={"enabled": False})
    routes = api("get", "/snapshot").get_json()["routes"]
    assert routes == {"chat": {"id": routes["chat"]["id"], "sticky": True,
                               "versions": [{"model": "chat-stable", "percent": 90}]}}
