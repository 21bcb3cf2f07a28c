"""A snapshot push recompiles only what changed: a model whose document is the same
keeps its compiled pools, so its weighted round-robin goes on where it was (one
worker, so the sequence is deterministic); a model that changed starts afresh."""


def _pool(backends):
    return [backends["openai-a"].entry(1, weight=100),
            backends["openai-b"].entry(2, weight=100)]


def _next(gw, helpers):
    r = helpers.chat(gw)
    assert r.status_code == 200, r.text
    return r.headers["X-Demo-Backend"]


def test_unchanged_model_keeps_its_round_robin(gateway_factory, helpers, backends):
    gw = gateway_factory(workers=1)
    models = {"chat-demo": (2000, _pool(backends))}
    assert gw.push(helpers.make_snapshot(1, models)).status_code == 200
    assert [_next(gw, helpers) for _ in range(3)] == ["openai-a", "openai-b", "openai-a"]

    # another consumer, same model: the pool (and where it stands) carries over
    snap = helpers.make_snapshot(2, models)
    snap["consumers"]["3"] = {"id": 3, "name": "carol", "allowed_models": None}
    assert gw.push(snap).status_code == 200
    assert _next(gw, helpers) == "openai-b"

    # the model itself changed (its timeout): a fresh pool starts at the first backend
    snap = helpers.make_snapshot(3, {"chat-demo": (3000, _pool(backends))})
    assert gw.push(snap).status_code == 200
    assert [_next(gw, helpers) for _ in range(2)] == ["openai-a", "openai-b"]


def test_changed_backend_is_served_at_once(gateway_factory, helpers, backends):
    gw = gateway_factory(workers=1)
    one = [backends["openai-a"].entry(1)]
    assert gw.push(helpers.make_snapshot(1, {"chat-demo": (2000, one)})).status_code == 200
    assert _next(gw, helpers) == "openai-a"
    moved = [backends["openai-b"].entry(1)]     # same id, another backend
    assert gw.push(helpers.make_snapshot(2, {"chat-demo": (2000, moved)})).status_code == 200
    assert _next(gw, helpers) == "openai-b"
