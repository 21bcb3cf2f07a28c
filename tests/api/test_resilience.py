"""A model's fallback_model (admin API, snapshot) and backend readiness from the
controller's health checks (control_plane/controller/health_loop.py against real demo backends,
GET /api/v1/health)."""
from __future__ import annotations

import pytest
import requests

from control_plane.db import make_engine, make_sessionmaker
from control_plane.demo.backends import serve
from control_plane.clients.gateway import GatewayClient
from control_plane.controller.health_loop import HealthLoop
from control_plane.services import snapshot
from control_plane.settings import Settings


def test_fallback_model_is_validated_and_in_the_snapshot(api, make):
    fast = make("model")
    resp = api("post", "/models", json={"name": "precise", "fallback_model": "nope"})
    assert resp.status_code == 422
    assert "fallback_model" in resp.get_json()["error"]["fields"]
    resp = api("post", "/models", json={"name": "precise", "fallback_model": "precise"})
    assert resp.status_code == 422
    precise = make("model", fallback_model=fast["name"])
    assert precise["fallback_model"] == fast["name"]
    resp = api("patch", f"/models/{precise['id']}", json={"fallback_model": precise["name"]})
    assert resp.status_code == 422
    snap = api("get", "/snapshot").get_json()
    assert snap["models"][precise["name"]]["fallback_model"] == fast["name"]
    assert snap["models"][fast["name"]]["fallback_model"] is None

    # a rename follows; deleting a model still named as a fallback is refused
    resp = api("patch", f"/models/{fast['id']}", json={"name": "fast-renamed"})
    assert resp.status_code == 200
    assert api("get", f"/models/{precise['id']}").get_json()["fallback_model"] == "fast-renamed"
    resp = api("delete", f"/models/{fast['id']}")
    assert resp.status_code == 409
    assert precise["name"] in resp.get_json()["error"]["message"]

    # a disabled fallback is no fallback for the gateway
    api("patch", f"/models/{fast['id']}", json={"enabled": False})
    snap = api("get", "/snapshot").get_json()
    assert snap["models"][precise["name"]]["fallback_model"] is None

    resp = api("patch", f"/models/{precise['id']}", json={"fallback_model": None})
    assert resp.status_code == 200 and resp.get_json()["fallback_model"] is None
    assert api("delete", f"/models/{fast['id']}").status_code == 204


@pytest.fixture
def demo():
    started = []

    def start(protocol, loading_s=0.0):
        server = serve(protocol, "127.0.0.1", 0, f"{protocol}-{len(started)}",
                       loading_s=loading_s)
        started.append(server)
        return server

    yield start
    for s in started:
        s.shutdown()


def test_health_checks_per_protocol(api, make, demo, db_url):
    expected = {}
    for protocol in ("openai", "predict", "kserve_v2", "tfserving", "anthropic"):
        for loading in (False, True):
            server = demo(protocol, loading_s=600 if loading else 0)
            b = make("backend", protocol=protocol, url=server.url)
            expected[b["name"]] = "loading" if loading else "ready"
    dead = make("backend", url="http://127.0.0.1:1")
    expected[dead["name"]] = "unreachable"

    engine = make_engine(db_url)
    sessions = make_sessionmaker(engine)
    try:
        with sessions() as session:
            snap = snapshot.build(session)
        loop = HealthLoop(GatewayClient(None))
        table = loop.run(Settings(health_timeout=2.0), sessions, [], snap)
    finally:
        engine.dispose()
    assert {s["state"] for s in table.values()} == {"ready", "loading", "unreachable"}
    assert all(s.get("retry_after", 0) >= 1 for s in table.values() if s["state"] == "loading")

    report = api("get", "/health").get_json()
    got = {b["backend"]: b["state"] for b in report["backends"]}
    assert got == expected
    assert all(b["since"] for b in report["backends"])
    # a model shows its best backend
    assert set(report["models"].values()) <= {"ready", "loading", "unreachable"}


def test_demo_backend_loads_then_serves(demo):
    server = demo("kserve_v2", loading_s=600)
    r = requests.get(server.url + "/v2/models/m/ready", timeout=5)
    assert r.status_code == 503
    r = requests.post(server.url + "/v2/models/m/infer", timeout=5, json={
        "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]})
    assert r.status_code == 503 and "loading" in r.json()["error"]
    r = requests.post(server.url + "/demo/loading", json={"seconds": 0}, timeout=5)
    assert r.json() == {"loading": False}
    assert requests.get(server.url + "/v2/models/m/ready", timeout=5).status_code == 200
    assert requests.get(server.url + "/health", timeout=5).status_code == 200
