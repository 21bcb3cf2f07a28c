"""The weight formula and the success window, without any process."""
from __future__ import annotations

from control_plane.services.weights import (BackendInput, Coefficients, OutcomeWindow,
                                            compute, pool_weights, pools_of)

DEFAULT = Coefficients()


def test_formula_with_the_design_coefficients():
    w = pool_weights([BackendInput(1, free_fraction=0.8), BackendInput(2, free_fraction=0.2)],
                     DEFAULT)
    # 0.6*0.8 + 0.3 + 0.1 = 0.88 ; 0.6*0.2 + 0.3 + 0.1 = 0.52
    assert w == {1: 880, 2: 520}


def test_memory_only_coefficients_are_proportional_to_free_memory():
    w = pool_weights([BackendInput(1, 0.75), BackendInput(2, 0.25)], Coefficients(1, 0, 0))
    assert w == {1: 750, 2: 250}


def test_success_rate_and_latency():
    w = pool_weights([BackendInput(1, 1.0, successes=10, failures=0, latencies_ms=[50] * 5),
                      BackendInput(2, 1.0, successes=5, failures=5, latencies_ms=[150] * 5)],
                     DEFAULT)
    # backend 2: 0.6 + 0.3*0.5 + 0.1*(100/200) = 0.80
    assert w == {1: 1000, 2: 800}


def test_stale_telemetry_never_drains():
    # backend 2 has no fresh telemetry: it gets the pool's mean, not zero
    w = pool_weights([BackendInput(1, 0.5), BackendInput(2, None)], Coefficients(1, 0, 0))
    assert w == {1: 500, 2: 500}
    w = pool_weights([BackendInput(1, None), BackendInput(2, None)], Coefficients(1, 0, 0))
    assert w == {1: 1000, 2: 1000}


def test_all_zero_pool_serves_evenly():
    w = pool_weights([BackendInput(1, 0.0), BackendInput(2, 0.0)], Coefficients(1, 0, 0))
    assert w == {1: 1, 2: 1}


def test_outcome_window_merges_gateways_and_survives_restarts():
    win = OutcomeWindow(window_s=10)
    win.update("gw1", "1", 10, 0, now=0)
    win.update("gw2", "1", 5, 5, now=0)
    assert win.totals("1", now=1) == (15, 5)
    win.update("gw1", "1", 12, 1, now=2)        # +2 ok, +1 fail
    win.update("gw2", "1", 3, 0, now=2)         # gw2 restarted: 3 new successes
    assert win.totals("1", now=3) == (20, 6)
    assert win.totals("1", now=11) == (5, 1)    # the t=0 events left the window


def test_compute_over_a_snapshot():
    snap = {"models": {"m": {"backends": [
        {"id": 1, "name": "a", "protocol": "openai", "weight": 100},
        {"id": 2, "name": "b", "protocol": "openai", "weight": 100},
        {"id": 3, "name": "c", "protocol": "openai", "weight": 0},
        {"id": 4, "name": "d", "protocol": "predict", "weight": 5}]}}}
    pools = pools_of(snap)
    assert [(p.protocol, p.backend_ids) for p in pools] == [("openai", (1, 2)),
                                                           ("predict", (4,))]
    table = compute(pools, {"m": Coefficients(1, 0, 0)}, DEFAULT, {"a": 0.9, "b": 0.1},
                    OutcomeWindow(), {}, now=0)
    assert table == {"1": 900, "2": 100, "4": 1000}


def test_saturated_backends_are_those_with_almost_no_free_room():
    from control_plane.services.weights import SATURATED_FREE, Pool, saturated
    pools = [Pool("chat", "openai", (1, 2, 3), ("a", "b", "c")),
             Pool("asr", "predict", (10,), ("d",))]
    free = {"a": 0.0, "b": SATURATED_FREE, "c": 0.5, "d": 0.01}
    # "c" has room; a backend without a fresh figure ("e") is never saturated
    assert saturated(pools, free) == ["1", "2", "10"]
    assert saturated(pools, {}) == []
