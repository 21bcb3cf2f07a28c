"""Prometheus scraping moves traffic, end to end: two demo backends serve /metrics
(one as vLLM, one as dcgm-exporter), the controller scrapes them, computes weights
and pushes them to the real gateway, and traffic follows the free capacity. A
backend whose /metrics fails is shown as failing and goes stale; it is never drained."""
from __future__ import annotations

import signal
from collections import Counter

import requests

N = 200
TOLERANCE = 0.08   # SWRR is exact per worker; 2 workers, arbitrary connection spread




def _share(stack, key, name) -> float:
    seen = Counter(stack.chat(key, "scraped").headers["X-Demo-Backend"] for _ in range(N))
    return seen[name] / N


def _set(url, **body) -> None:
    requests.post(url + "/demo/metrics", json=body, timeout=5).raise_for_status()


def test_kv_cache_usage_scraped_from_model_servers_moves_traffic(stack):
    admin = stack.admin
    url_v = stack.start_backend("vllm-1", metrics="vllm", metrics_used=0.2)
    url_d = stack.start_backend("dcgm-1", metrics="dcgm", metrics_used=0.8)
    model = admin.create("models", name="scraped", timeout_ms=5000,
                         weight_coefficients={"memory": 1, "success": 0, "latency": 0})
    v = admin.create("backends", name="vllm-1", model_id=model["id"], url=url_v,
                     protocol="openai", metrics_url=url_v + "/metrics",
                     metrics_format="vllm")
    d = admin.create("backends", name="dcgm-1", model_id=model["id"], url=url_d,
                     protocol="openai", metrics_url=url_d + "/metrics",
                     metrics_format="dcgm")
    consumer = admin.create("consumers", name="t")
    key = admin.create("keys", consumer_id=consumer["id"])["key"]
    stack.wait_served()
    ids = [v["id"], d["id"]]

    stack.wait_weights(ids, [800, 200])
    assert abs(_share(stack, key, "vllm-1") - 0.8) <= TOLERANCE

    # The servers fill up the other way round; traffic follows.
    _set(url_v, used=0.75)
    _set(url_d, used=0.25)
    took = stack.wait_weights(ids, [250, 750])
    print(f"/metrics change -> gateway weights in {took:.2f}s (weights interval 1s)")
    assert abs(_share(stack, key, "vllm-1") - 0.25) <= TOLERANCE

    # Requests queued in vLLM count against it: 16 waiting halve its free figure.
    _set(url_v, used=0.0, waiting=16)
    stack.wait_weights(ids, [500, 750])

    scraped = {s["backend"]: s for s in
               admin._call("GET", "/telemetry/scrapes").json()["scrapes"]}
    assert scraped["vllm-1"]["values"]["requests_waiting"] == 16.0
    assert scraped["dcgm-1"]["free_fraction"] == 0.75
    assert [scraped[n]["stale"] for n in ("vllm-1", "dcgm-1")] == [False, False]
    history = admin._call("GET", f"/telemetry/scrapes/{d['id']}/history?seconds=60").json()
    assert {s["free_fraction"] for s in history["samples"]} >= {0.2, 0.75}

    # vLLM's /metrics breaks. Its last figure holds until it is stale (2 s here), then
    # its memory term is the pool's mean (dcgm-1's 0.75): equal weights, never 0.
    with open(stack.config_file, "a") as f:
        f.write("SLUICE_TELEMETRY_STALE_AFTER=2\n")
    stack.children["controller"].send_signal(signal.SIGHUP)
    _set(url_v, fail=True)
    stack.wait_weights(ids, [750, 750])
    scraped = {s["backend"]: s for s in
               admin._call("GET", "/telemetry/scrapes").json()["scrapes"]}
    assert scraped["vllm-1"]["error"] == "HTTPError: HTTP 500"
    assert scraped["dcgm-1"]["error"] is None

    _set(url_v, fail=False, used=0.0, waiting=0)
    stack.wait_weights(ids, [1000, 750])
