"""Resilience through the whole stack: the controller's health checks hold traffic
off a loading model (503 "model loading") until it is ready; a model configured
through the admin API with a fallback answers through it when its backend times out."""
from __future__ import annotations

import time

import requests


def _wait(check, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _answered(r, status):
    """`r` when it has `status`, else None (a Response is falsy when it is an error)."""
    return r if r.status_code == status else None


def _infer(stack, key, model):
    return requests.post(stack.gateway.url + f"/v2/models/{model}/infer", timeout=10,
                         headers={"Authorization": f"Bearer {key}"},
                         json={"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32",
                                           "data": [1, 2]}]})


def test_loading_model_is_503_until_its_backend_is_ready(stack):
    admin = stack.admin
    url = stack.start_backend("cv-a", protocol="kserve_v2", loading_seconds=600)
    model = admin.create("models", name="cv-demo", timeout_ms=5000)
    backend = admin.create("backends", name="cv-a", model_id=model["id"], url=url,
                           protocol="kserve_v2")
    consumer = admin.create("consumers", name="t")
    key = admin.create("keys", consumer_id=consumer["id"])["key"]
    stack.wait_served()

    # the controller's probe sees /v2/models/cv-demo/ready answer 503
    def loading_reported():
        r = admin._call("get", "/health").json()
        return r["models"].get("cv-demo") == "loading" and r
    report = _wait(loading_reported, what="the admin API to report loading")
    assert [b["state"] for b in report["backends"] if b["backend_id"] == backend["id"]] \
        == ["loading"]
    r = _wait(lambda: _answered(_infer(stack, key, "cv-demo"), 503), what="503 model loading")
    err = r.json()["error"]
    assert err["type"] == "backend_unavailable"
    assert err["message"] == "model cv-demo is loading"
    assert int(r.headers["Retry-After"]) == err["retry_after"] >= 1

    # the model finishes loading: the next probes let traffic through
    requests.post(url + "/demo/loading", json={"seconds": 0}, timeout=5).raise_for_status()
    r = _wait(lambda: _answered(_infer(stack, key, "cv-demo"), 200), what="200 once ready")
    assert r.json()["outputs"]
    _wait(lambda: admin._call("get", "/health").json()["models"]["cv-demo"] == "ready",
          what="the admin API to report ready")


def test_fallback_configured_through_the_admin_api(stack):
    admin = stack.admin
    slow = stack.start_backend("slow", latency_ms=5000)
    fast = stack.start_backend("fast")
    fast_model = admin.create("models", name="cv-lowprec", timeout_ms=5000)
    admin.create("backends", name="fast", model_id=fast_model["id"], url=fast,
                 protocol="openai")
    precise = admin.create("models", name="cv-precise", timeout_ms=500,
                           fallback_model="cv-lowprec")
    admin.create("backends", name="slow", model_id=precise["id"], url=slow, protocol="openai")
    consumer = admin.create("consumers", name="t-fallback")
    key = admin.create("keys", consumer_id=consumer["id"])["key"]
    stack.wait_served()

    r = stack.chat(key, "cv-precise")
    assert r.status_code == 200, r.text
    assert r.headers["X-Sluice-Fallback"] == "cv-lowprec"
    assert r.headers["X-Demo-Backend"] == "fast"

    # without the fallback: the caller gets the timeout
    admin.update("models", precise["id"], fallback_model=None)
    stack.wait_served()
    r = stack.chat(key, "cv-precise")
    assert r.status_code == 504 and r.json()["error"]["type"] == "backend_timeout"
    assert "X-Sluice-Fallback" not in r.headers
