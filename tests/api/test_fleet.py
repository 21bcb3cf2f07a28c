"""Gateways registering themselves with the admin API, and how the fleet reads:
POST /api/v1/gateways/register (gateway token), GET /gateways, /fleet, /controllers."""
from __future__ import annotations

import dataclasses
import re
from datetime import timedelta

import pytest
from sqlalchemy import func, update

from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import admin_users
from control_plane.tables.config import Gateway

GATEWAY_TOKEN = "gateway-token-for-tests"


@pytest.fixture
def fleet_app(app):
    settings = app.config["SLUICE_SETTINGS"]
    app.config["SLUICE_SETTINGS"] = dataclasses.replace(
        settings, gateway_token=GATEWAY_TOKEN, gateway_ttl=15.0, gateway_gone_after=150.0)
    return app


@pytest.fixture
def join(fleet_app):
    client = fleet_app.test_client()

    def post(token=GATEWAY_TOKEN, **fields):
        body = {"name": "edge-1", "internal_url": "http://10.0.0.5:8001",
                "boot_id": "b1", "sluice_version": "0.1.0", **fields}
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return client.post("/api/v1/gateways/register", json=body, headers=headers)
    return post


def gateways(api) -> dict[str, dict]:
    resp = api("get", "/gateways")
    assert resp.status_code == 200
    return {g["name"]: g for g in resp.get_json()["items"]}


def silent_for(db_url, name: str, seconds: float) -> None:
    """Move a member's last heartbeat into the past (the database's clock decides)."""
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(update(Gateway).where(Gateway.name == name).values(
                last_seen_at=func.now() - timedelta(seconds=seconds)))
    finally:
        engine.dispose()


def test_a_gateway_registers_and_shows_live_with_its_boot_and_version(join, api):
    resp = join()
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["name"] == "edge-1" and body["joined"] is True and body["state"] == "live"
    assert body["ttl_s"] == 15.0
    g = gateways(api)["edge-1"]
    assert g["registered"] is True and g["live"] is True and g["state"] == "live"
    assert g["internal_url"] == "http://10.0.0.5:8001"
    assert g["boot_id"] == "b1" and g["sluice_version"] == "0.1.0"
    assert g["last_seen_at"] and g["acked_version"] is None and g["lag"] is None
    # a heartbeat is the same POST: not a new join
    assert join().get_json()["joined"] is False
    assert len(gateways(api)) == 1


def test_wrong_missing_or_admin_token_is_refused_in_the_error_format(join):
    for token, status in (("nope-not-it", 403), (None, 401),
                          ("test-admin-token", 403)):
        resp = join(token=token)
        assert resp.status_code == status
        error = resp.get_json()["error"]
        assert error["code"] == status and error["type"] in ("unauthorized", "forbidden")
        assert GATEWAY_TOKEN not in resp.get_data(as_text=True)


def test_registration_fields_are_validated(join):
    resp = join(internal_url="ftp://x", boot_id="")
    assert resp.status_code == 422
    assert set(resp.get_json()["error"]["fields"]) == {"internal_url", "boot_id"}


def test_silent_member_goes_stale_then_gone_and_comes_back(join, api, db_url):
    join()
    silent_for(db_url, "edge-1", 20)
    g = gateways(api)["edge-1"]
    assert (g["state"], g["live"]) == ("stale", False)
    silent_for(db_url, "edge-1", 200)
    assert gateways(api)["edge-1"]["state"] == "gone"
    summary = api("get", "/fleet").get_json()
    assert (summary["live"], summary["gone"]) == (0, 1)
    assert join().get_json()["joined"] is True
    assert gateways(api)["edge-1"]["state"] == "live"


def test_a_new_boot_forgets_the_acked_version(join, api, db_url):
    join()
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(update(Gateway).values(acked_version=1))
    engine.dispose()
    g = gateways(api)["edge-1"]
    assert (g["acked_version"], g["lag"], g["on_current_version"]) == (1, 0, True)
    join()                                  # same boot: nothing forgotten
    assert gateways(api)["edge-1"]["acked_version"] == 1
    join(boot_id="b2")                      # restarted: it must get the snapshot again
    g = gateways(api)["edge-1"]
    assert (g["boot_id"], g["acked_version"]) == ("b2", None)


def test_leaving_marks_gone_at_once_and_a_newcomer_may_take_the_address(join, api):
    join()
    assert join(leaving=True).get_json()["state"] == "gone"
    assert gateways(api)["edge-1"]["state"] == "gone"
    join(name="edge-2", boot_id="b9")       # same address, another member
    found = gateways(api)
    assert found["edge-2"]["state"] == "live" and found["edge-1"]["state"] == "gone"


def test_a_new_member_on_a_live_members_address_replaces_it(join, api):
    join()
    join(name="edge-2", boot_id="b9")
    found = gateways(api)
    assert found["edge-1"]["state"] == "gone" and found["edge-2"]["state"] == "live"


def test_an_operator_listed_name_or_address_cannot_be_taken(join, api):
    assert api("post", "/gateways", json={"name": "static-1",
                                          "internal_url": "http://10.0.0.9:8001"}
               ).status_code == 201
    for fields in ({"name": "static-1"}, {"internal_url": "http://10.0.0.9:8001"}):
        resp = join(**fields)
        assert resp.status_code == 409, resp.get_json()
        assert resp.get_json()["error"]["type"] == "conflict"
    static = gateways(api)["static-1"]
    assert static["registered"] is False and static["state"] == "live"


def test_fleet_summary_counts_gateways_on_the_current_version(join, api, make, db_url):
    join()
    join(name="edge-2", internal_url="http://10.0.0.6:8001", boot_id="b2")
    make("model")
    version = api("get", "/config").get_json()["version"]
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(update(Gateway).where(Gateway.name == "edge-1")
                     .values(acked_version=version))
        conn.execute(update(Gateway).where(Gateway.name == "edge-2")
                     .values(acked_version=version - 1))
    engine.dispose()
    summary = api("get", "/fleet").get_json()
    assert summary == {"current_version": version, "live": 2, "on_current_version": 1,
                       "stale": 0, "gone": 0, "controller": None}
    assert gateways(api)["edge-2"]["lag"] == 1


def test_controllers_list_is_empty_without_controllers(api):
    assert api("get", "/controllers").get_json() == {"active": None, "items": []}


def test_admin_ui_shows_the_fleet_and_the_current_version_tile(join, fleet_app, db_url):
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        admin_users.create_user(session, "ops", "a-long-password-1", "viewer")
    engine.dispose()
    join()
    ui = fleet_app.test_client()
    page = ui.get("/admin/login").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    resp = ui.post("/admin/login", data={"username": "ops", "password": "a-long-password-1",
                                         "csrf_token": token})
    assert resp.status_code == 302
    status = ui.get("/admin/status.json").get_json()
    assert status["fleet"] == {"live": 1, "on_current_version": 0, "text": "0 of 1",
                               "controller": None}
    page = ui.get("/admin/").get_data(as_text=True)
    assert "Gateways on the current version" in page and "0 of 1" in page
    listing = ui.get("/admin/gateways/").get_data(as_text=True)
    assert "edge-1" in listing and "registered" in listing and "b1" in listing
    assert ">live<" in listing
