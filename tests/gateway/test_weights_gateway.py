"""Controller weights on the gateway: pushed tables steer traffic, decay back to the
static weights when pushes stop; per-backend stats for the controller."""
from __future__ import annotations

import time
from collections import Counter

import pytest


def _serve(gateway, helpers, pool, **extra):
    snap = helpers.make_snapshot(1, {"chat-demo": (3000, pool)})
    snap.update(extra)
    r = gateway.push(snap)
    assert r.status_code == 200, r.text


def _shares(gateway, helpers, n):
    seen = Counter(helpers.chat(gateway).headers["X-Demo-Backend"] for _ in range(n))
    return {k: v / n for k, v in seen.items()}


def test_pushed_weights_steer_traffic(gateway, helpers, backends):
    _serve(gateway, helpers, [backends["openai-a"].entry(1), backends["openai-b"].entry(2)])
    r = gateway.push_weights({"version": 1, "weights": {"1": 800, "2": 200}, "hold_s": 60})
    assert r.status_code == 200 and r.json() == {"version": 1}
    shares = _shares(gateway, helpers, 200)
    # SWRR is exact per worker (0.8); 2 workers with an arbitrary spread: +-0.08
    assert 0.72 <= shares["openai-a"] <= 0.88, shares
    st = gateway.weights_status()
    assert st["state"] == "fresh" and st["version"] == 1 and st["weights"] == {"1": 800,
                                                                               "2": 200}


def test_zero_weight_drains_and_unknown_ids_are_ignored(gateway, helpers, backends):
    _serve(gateway, helpers, [backends["openai-a"].entry(1), backends["openai-b"].entry(2)])
    assert gateway.push_weights({"version": 5, "weights": {"1": 0, "99": 500},
                                 "hold_s": 60}).ok
    assert _shares(gateway, helpers, 20) == {"openai-b": 1.0}


def test_weights_decay_to_static_when_pushes_stop(gateway, helpers, backends):
    _serve(gateway, helpers, [backends["openai-a"].entry(1, weight=100),
                              backends["openai-b"].entry(2, weight=100)])
    assert gateway.push_weights({"version": 1, "weights": {"1": 1000, "2": 0},
                                 "hold_s": 0.5, "decay_s": 1}).ok
    assert _shares(gateway, helpers, 10) == {"openai-a": 1.0}
    time.sleep(2.0)   # hold 0.5 s + decay 1 s: the static 100/100 now
    assert gateway.weights_status()["state"] == "static"
    shares = _shares(gateway, helpers, 100)
    assert 0.4 <= shares.get("openai-b", 0) <= 0.6, shares


def test_weights_validation_and_order(gateway_factory, helpers):
    gateway = gateway_factory()  # it reads the weights state from zero: a gateway of its own
    st = gateway.weights_status()
    assert st["state"] == "static" and st["version"] == 0
    for bad in ({"version": 0, "weights": {}}, {"version": 1, "weights": {"1": 1001}},
                {"version": 1, "weights": {"1": -1}}, {"version": 1, "weights": [1]},
                {"version": 1, "weights": {}, "hold_s": "x"}, {"weights": {}}):
        r = gateway.push_weights(bad)
        helpers.assert_error(r, 400, "invalid_request")
    assert gateway.push_weights({"version": 7, "weights": {}}).ok
    helpers.assert_error(gateway.push_weights({"version": 6, "weights": {}}), 409, "conflict")


def test_stats_count_outcomes_and_last_latencies(gateway_factory, helpers, backends):
    gateway = gateway_factory()  # it counts stats from zero: a gateway of its own
    _serve(gateway, helpers, [backends["openai-a"].entry(1)])
    for _ in range(3):
        assert helpers.chat(gateway, headers={"X-Demo-Latency-Ms": "20"}).status_code == 200
    for _ in range(4):
        assert helpers.chat(gateway, headers={"X-Demo-Status": "500"}).status_code == 502
    assert helpers.chat(gateway, headers={"X-Demo-Status": "404"}).status_code == 404
    deadline = time.monotonic() + 3   # the log phase runs after the answer went out
    while (st := gateway.stats()["backends"]["1"])["successes"] + st["failures"] < 8 \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    assert st["successes"] == 4 and st["failures"] == 4    # a 4xx is the backend working
    assert len(st["latency_ms"]) == 5 and all(v >= 0 for v in st["latency_ms"])
    assert st["circuit"] == "closed"


@pytest.mark.parametrize("method,path", [("GET", "/internal/nope"),
                                         ("DELETE", "/internal/weights"),
                                         ("POST", "/internal/stats")])
def test_internal_errors_in_template(gateway, helpers, method, path):
    import requests
    r = requests.request(method, gateway.internal_url + path,
                         headers={"Authorization": f"Bearer {gateway.cfg.token}"}, timeout=5)
    assert r.status_code in (404, 405)
    assert r.json()["error"]["code"] == r.status_code
