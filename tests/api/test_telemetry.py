"""Telemetry ingest (agent token or admin token), latest values, staleness, history."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from control_plane.app import create_app, dispose
from control_plane.settings import Settings
from control_plane.tables.records import Gpu

AGENT_TOKEN = "test-agent-token-0123"


@pytest.fixture
def agent_app(db_url):
    app = create_app({"DATABASE_URL": db_url, "ADMIN_TOKEN": "test-admin-token",
                      "TESTING": True,
                      "SLUICE_SETTINGS": Settings(agent_token=AGENT_TOKEN,
                                                  telemetry_stale_after=15.0)})
    yield app
    dispose(app)


def report(**over):
    body = {"host": "gpu-1", "source": "simulated",
            "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mb": 81920,
                      "memory_used_mb": 20480, "utilization_pct": 40, "temperature_c": 50,
                      "power_w": 200.5, "backends": ["llama-a", "nope"]},
                     {"index": 1, "name": "Tesla T4", "memory_total_mb": 15360,
                      "memory_used_mb": 0}]}
    body.update(over)
    return body


def post(client, body, token=AGENT_TOKEN):
    return client.post("/api/v1/telemetry", json=body,
                       headers={"Authorization": f"Bearer {token}"})


def test_agent_reports_and_operator_reads_latest(agent_app, make):
    make("backend", name="llama-a")
    client = agent_app.test_client()
    r = post(client, report())
    assert r.status_code == 200, r.get_json()
    assert r.get_json() == {"accepted": 2, "unknown_backends": ["nope"]}
    # a second report updates the latest values in place
    body = report()
    body["gpus"][0]["memory_used_mb"] = 40960
    assert post(client, body).status_code == 200

    r = client.get("/api/v1/telemetry", headers={"Authorization": "Bearer test-admin-token"})
    gpus = r.get_json()["gpus"]
    assert [(g["index"], g["gpu_class"], g["stale"]) for g in gpus] == [
        (0, "A100", False), (1, "T4", False)]
    assert gpus[0]["memory_free_mb"] == 81920 - 40960
    assert gpus[0]["backends"] == ["llama-a", "nope"]

    h = client.get(f"/api/v1/telemetry/gpus/{gpus[0]['id']}/history?seconds=60",
                   headers={"Authorization": "Bearer test-admin-token"})
    assert [s["memory_used_mb"] for s in h.get_json()["samples"]] == [20480, 40960]


def test_stale_gpus_are_marked(agent_app):
    client = agent_app.test_client()
    assert post(client, report()).status_code == 200
    session = agent_app.extensions["sluice"].sessionmaker()
    with session, session.begin():
        for g in session.query(Gpu):
            g.reported_at = datetime.now(timezone.utc) - timedelta(seconds=60)
    r = client.get("/api/v1/telemetry", headers={"Authorization": "Bearer test-admin-token"})
    assert all(g["stale"] and g["age_s"] >= 60 for g in r.get_json()["gpus"])


def test_agent_token_only_posts_telemetry(agent_app):
    client = agent_app.test_client()
    r = client.get("/api/v1/telemetry", headers={"Authorization": f"Bearer {AGENT_TOKEN}"})
    assert r.status_code == 403
    assert post(client, report(), token="wrong").status_code == 403
    assert client.post("/api/v1/telemetry", json=report()).status_code == 401


@pytest.mark.parametrize("body,field", [
    ({"host": "bad host"}, "host"),
    ({"source": "dcgm"}, "source"),
    ({"gpus": []}, "gpus"),
    ({"gpus": [{"index": 0, "name": "x", "memory_total_mb": 10, "memory_used_mb": 11}]},
     "gpus[0].memory_used_mb"),
    ({"gpus": [{"index": -1, "name": "x", "memory_total_mb": 10, "memory_used_mb": 1}]},
     "gpus[0].index"),
    ({"gpus": [{"index": 0, "name": "x", "memory_total_mb": 10, "memory_used_mb": 1,
                "temperature_c": "hot"}]}, "gpus[0].temperature_c"),
    ({"gpus": [{"index": 0, "name": "x", "memory_total_mb": 10}]}, "gpus[0].memory_used_mb"),
    ({"gpus": [{"index": 0, "name": "x", "memory_total_mb": 10, "memory_used_mb": 1,
                "backends": "llama"}]}, "gpus[0].backends"),
    ({"extra": 1}, "extra"),
])
def test_bad_reports_are_422_naming_the_field(agent_app, body, field):
    r = post(agent_app.test_client(), report(**body))
    assert r.status_code == 422, r.get_json()
    assert field in r.get_json()["error"]["fields"]


def test_report_that_is_not_an_object_is_400(agent_app):
    r = post(agent_app.test_client(), [1, 2])
    assert r.status_code == 400
    assert r.get_json()["error"]["type"] == "invalid_request"


def test_history_of_unknown_gpu_is_404_and_bad_window_422(agent_app):
    client = agent_app.test_client()
    h = {"Authorization": "Bearer test-admin-token"}
    assert client.get("/api/v1/telemetry/gpus/999/history", headers=h).status_code == 404
    assert client.get("/api/v1/telemetry/gpus/1/history?seconds=x", headers=h).status_code == 422


def test_model_weight_coefficients(api, make):
    m = make("model", weight_coefficients={"memory": 1, "success": 0, "latency": 0})
    assert m["weight_coefficients"] == {"memory": 1.0, "success": 0.0, "latency": 0.0}
    r = api("patch", f"/models/{m['id']}", json={"weight_coefficients": {"memory": 2}})
    assert r.status_code == 422 and "weight_coefficients" in r.get_json()["error"]["fields"]
    r = api("patch", f"/models/{m['id']}", json={"weight_coefficients": None})
    assert r.status_code == 200 and r.get_json()["weight_coefficients"] is None
