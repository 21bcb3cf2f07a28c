"""Priority admission and circuit-breaker settings through the admin API and into
the snapshot."""
from __future__ import annotations

import pytest

from control_plane.app import create_app, dispose
from control_plane.settings import Settings, SettingsError, load_settings
from control_plane.tables.records import AuditEntry


def test_plan_priority_and_backend_capacity_reach_the_snapshot(api, make):
    plan = make("plan", name="batch", priority="best_effort", priority_header=True)
    assert (plan["priority"], plan["priority_header"]) == ("best_effort", True)
    assert make("plan", name="default")["priority"] == "standard"
    backend = make("backend", max_in_flight=8)
    unlimited = make("backend")
    assert (backend["max_in_flight"], unlimited["max_in_flight"]) == (8, None)

    snap = api("get", "/snapshot").get_json()
    entry = snap["plans"][str(plan["id"])]
    assert (entry["priority"], entry["priority_header"]) == ("best_effort", True)
    by_id = {b["id"]: b for m in snap["models"].values() for b in m["backends"]}
    assert by_id[backend["id"]]["max_in_flight"] == 8
    assert "max_in_flight" not in by_id[unlimited["id"]]    # absent: unlimited

    version = snap["version"]
    r = api("patch", f"/backends/{backend['id']}", json={"max_in_flight": None})
    assert r.status_code == 200 and r.get_json()["max_in_flight"] is None
    r = api("patch", f"/plans/{plan['id']}", json={"priority": "critical"})
    assert r.status_code == 200
    snap = api("get", "/snapshot").get_json()
    assert snap["version"] == version + 2
    assert snap["plans"][str(plan["id"])]["priority"] == "critical"


def test_buffer_at_peak_reaches_the_snapshot(api, make):
    plain = make("plan", name="plain")
    assert plain["buffer_at_peak"] is False
    plan = make("plan", name="bulk", priority="best_effort", buffer_at_peak=True)
    assert plan["buffer_at_peak"] is True
    snap = api("get", "/snapshot").get_json()
    assert snap["plans"][str(plan["id"])]["buffer_at_peak"] is True
    assert snap["plans"][str(plain["id"])]["buffer_at_peak"] is False
    r = api("patch", f"/plans/{plan['id']}", json={"buffer_at_peak": False})
    assert r.status_code == 200 and r.get_json()["buffer_at_peak"] is False
    r = api("patch", f"/plans/{plan['id']}", json={"buffer_at_peak": "yes"})
    assert r.status_code == 422
    assert set(r.get_json()["error"]["fields"]) == {"buffer_at_peak"}


def test_priority_changes_are_audited(api, make, app):
    plan = make("plan", name="gold")
    api("patch", f"/plans/{plan['id']}", json={"priority": "critical"})
    with app.extensions["sluice"].sessionmaker() as session:
        entry = session.query(AuditEntry).filter_by(resource="plan", action="update").one()
    assert (entry.before["priority"], entry.after["priority"]) == ("standard", "critical")


def test_invalid_priority_fields(api, make):
    r = api("post", "/plans", json={"name": "x", "priority": "urgent", "priority_header": 1})
    assert r.status_code == 422
    assert set(r.get_json()["error"]["fields"]) == {"priority", "priority_header"}
    backend = make("backend")
    for bad in (0, -1, 2.5, "4"):
        r = api("patch", f"/backends/{backend['id']}", json={"max_in_flight": bad})
        assert r.status_code == 422, bad
        assert set(r.get_json()["error"]["fields"]) == {"max_in_flight"}


def test_snapshot_breaker_section_defaults_to_the_brief(api):
    assert api("get", "/snapshot").get_json()["breaker"] == {
        "window_s": 60.0, "error_threshold": 0.3, "min_requests": 20, "cooldown_s": 30.0,
        "probes": 1}


def test_snapshot_breaker_section_from_settings(db_url):
    settings = load_settings({"SLUICE_BREAKER_WINDOW_S": "10", "SLUICE_BREAKER_ERROR_RATE": "0.5",
                              "SLUICE_BREAKER_MIN_REQUESTS": "4",
                              "SLUICE_BREAKER_COOLDOWN_S": "2", "SLUICE_BREAKER_PROBES": "3"})
    app = create_app({"DATABASE_URL": db_url, "ADMIN_TOKEN": "t" * 16, "TESTING": True,
                      "SLUICE_SETTINGS": settings})
    try:
        r = app.test_client().get("/api/v1/snapshot",
                                  headers={"Authorization": "Bearer " + "t" * 16})
    finally:
        dispose(app)
    assert r.get_json()["breaker"] == {"window_s": 10.0, "error_threshold": 0.5,
                                       "min_requests": 4, "cooldown_s": 2.0, "probes": 3}


@pytest.mark.parametrize("name,value", [("SLUICE_BREAKER_ERROR_RATE", "1.5"),
                                        ("SLUICE_BREAKER_ERROR_RATE", "0"),
                                        ("SLUICE_BREAKER_MIN_REQUESTS", "0"),
                                        ("SLUICE_BREAKER_PROBES", "1.5"),
                                        ("SLUICE_BREAKER_WINDOW_S", "-1")])
def test_bad_breaker_settings_name_the_variable(name, value):
    with pytest.raises(SettingsError, match=name):
        load_settings({name: value})
    assert Settings().breaker()["error_threshold"] == 0.3


def test_plan_queue_timeout_defaults_by_class_and_reaches_the_snapshot(api, make):
    plans = {p: make("plan", name=f"q-{p}", priority=p)
             for p in ("critical", "standard", "best_effort")}
    assert all(p["queue_timeout_ms"] is None for p in plans.values())
    custom = make("plan", name="q-custom", priority="standard", queue_timeout_ms=500)
    assert custom["queue_timeout_ms"] == 500

    snap = api("get", "/snapshot").get_json()["plans"]
    # null in the API: the class's bound goes to the gateway
    assert {p: snap[str(plans[p]["id"])]["queue_timeout_ms"] for p in plans} == {
        "critical": 10000, "standard": 2000, "best_effort": 0}
    assert snap[str(custom["id"])]["queue_timeout_ms"] == 500

    r = api("patch", f"/plans/{custom['id']}", json={"queue_timeout_ms": None})
    assert r.status_code == 200 and r.get_json()["queue_timeout_ms"] is None
    assert api("get", "/snapshot").get_json()["plans"][str(custom["id"])][
        "queue_timeout_ms"] == 2000
    for bad in (-1, 600_001, 1.5, "100", True):
        r = api("patch", f"/plans/{custom['id']}", json={"queue_timeout_ms": bad})
        assert r.status_code == 422, bad
        assert set(r.get_json()["error"]["fields"]) == {"queue_timeout_ms"}
