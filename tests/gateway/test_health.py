"""Backend readiness pushed by the controller (POST /internal/health,
lua/sluice/health.lua): loading backends get no traffic; a model whose backends are
all loading is a 503 "model loading" with Retry-After; states lapse after ttl_s."""
from __future__ import annotations

import time

import pytest
import requests


@pytest.fixture
def served(gateway_factory, default_snapshot):
    """A gateway of its own serving `default_snapshot`: these tests read the readiness
    table and its versions from a fresh start."""
    gw = gateway_factory()
    assert gw.push(default_snapshot).status_code == 200
    return gw


def push_health(gw, backends, version=1, ttl_s=None):
    body = {"version": version, "backends": backends}
    if ttl_s is not None:
        body["ttl_s"] = ttl_s
    return requests.post(gw.internal_url + "/internal/health", json=body, timeout=5,
                         headers={"Authorization": f"Bearer {gw.cfg.token}"})


def internal_get(gw, path):
    return requests.get(gw.internal_url + path, timeout=5,
                        headers={"Authorization": f"Bearer {gw.cfg.token}"})


def test_all_loading_is_503_model_loading(served, helpers):
    assert push_health(served, {"1": {"state": "loading", "retry_after": 7}}).status_code == 200
    r = helpers.chat(served)
    err = helpers.assert_error(r, 503, "backend_unavailable")
    assert err["message"] == "model chat-demo is loading"
    assert err["retry_after"] == 7 and r.headers["Retry-After"] == "7"
    # other models are not affected
    r = requests.post(served.url + "/v1/models/predict-demo/predict", timeout=5,
                      json={"instances": [1]},
                      headers={"Authorization": f"Bearer {helpers.KEY}"})
    assert r.status_code == 200
    # ready again: served again
    assert push_health(served, {"1": {"state": "ready"}}, version=2).status_code == 200
    assert helpers.chat(served).status_code == 200


def test_loading_backend_is_skipped_while_another_is_ready(gateway_factory, helpers, backends):
    gateway = gateway_factory()
    snap = helpers.make_snapshot(1, {"chat-demo": (5000, [backends["openai-a"].entry(1),
                                                          backends["openai-b"].entry(2)])})
    assert gateway.push(snap).status_code == 200
    assert push_health(gateway, {"1": {"state": "loading"}, "2": {"state": "ready"}}
                       ).status_code == 200
    seen = {helpers.chat(gateway).headers["X-Demo-Backend"] for _ in range(8)}
    assert seen == {"openai-b"}
    # unreachable is shown, not routed on (failures are the breaker's business)
    assert push_health(gateway, {"1": {"state": "ready"}, "2": {"state": "unreachable"}},
                       version=2).status_code == 200
    seen = {helpers.chat(gateway).headers["X-Demo-Backend"] for _ in range(8)}
    assert seen == {"openai-a", "openai-b"}


def test_states_lapse_when_pushes_stop(served, helpers):
    assert push_health(served, {"1": {"state": "loading"}}, ttl_s=1).status_code == 200
    helpers.assert_error(helpers.chat(served), 503, "backend_unavailable")
    deadline = time.monotonic() + 10
    while True:
        r = helpers.chat(served)
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code == 200
    assert internal_get(served, "/internal/health").json()["state"] == "lapsed"


def test_status_metrics_and_validation(served, helpers):
    assert internal_get(served, "/internal/health").json() == {
        "version": 0, "state": "none", "backends": {}}
    assert push_health(served, {"1": {"state": "loading", "retry_after": 3}},
                       version=5).status_code == 200
    st = internal_get(served, "/internal/health").json()
    assert st["version"] == 5 and st["state"] == "fresh"
    assert st["backends"]["1"]["state"] == "loading"
    text = internal_get(served, "/metrics").text
    assert 'sluice_backend_health_state{model="chat-demo",backend="openai-a"} 1' in text
    assert 'sluice_backend_health_state{model="predict-demo",backend="predict-a"} 3' in text

    r = push_health(served, {"1": {"state": "sleepy"}}, version=6)
    helpers.assert_error(r, 400, "invalid_request")
    r = push_health(served, {"1": {"state": "ready"}}, version=4)
    helpers.assert_error(r, 409, "conflict")
    r = requests.post(served.internal_url + "/internal/health", json={}, timeout=5)
    helpers.assert_error(r, 401, "unauthorized")
