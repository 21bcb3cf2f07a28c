"""The request context (lua/sluice/context.lua) crosses error_page redirects through
one registry entry per request, freed in the log phase: whatever the outcome, the
registry empties once requests are over (the sluice_request_contexts gauge)."""
import requests
from gateway_readings import access_lines, scrape
from waiting import eventually


def _contexts_held(gw) -> list[float] | None:
    """Every worker's gauge, once each worker has published one."""
    samples = scrape(gw).get("sluice_request_contexts", [])
    return [s.value for s in samples] if len(samples) == gw.cfg.workers else None


def test_every_outcome_frees_its_context(gateway_factory, helpers, backends, dead_port):
    gateway = gateway_factory()  # it counts contexts from zero: a gateway of its own
    snap = helpers.make_snapshot(1, {
        "chat-demo": (2000, [backends["openai-a"].entry(1)]),
        "dead-demo": (2000, [backends["openai-a"].entry(2, port=dead_port)]),
    })
    assert gateway.push(snap).status_code == 200
    for _ in range(5):
        assert helpers.chat(gateway).status_code == 200
        helpers.assert_error(helpers.chat(gateway, model="nope"), 404, "not_found")
        helpers.assert_error(helpers.chat(gateway, key=None), 401, "unauthorized")
        # nginx's own 502 (connect refused): error_page restores the context
        r = helpers.chat(gateway, model="dead-demo")
        helpers.assert_error(r, 502, "backend_error")
        # nginx's own 413 before access: no context was ever stashed
        r = requests.post(gateway.url + "/v1/chat/completions", data=b"x" * (2 << 20),
                          headers={"Authorization": f"Bearer {helpers.KEY}",
                                   "Content-Type": "application/json"}, timeout=10)
        helpers.assert_error(r, 413, "payload_too_large")
    held = eventually(lambda: (v := _contexts_held(gateway)) and all(x == 0 for x in v)
                      and v, timeout=10)
    assert held == [0] * gateway.cfg.workers


PLAN_KEY = "sk-test-context-plan-0123456789ab"


def test_concurrent_requests_each_keep_their_own_context(gateway_factory, helpers, backends):
    # A worker hands a finished request's context, emptied, to its next request
    # (context.recycle): requests of every kind, many at once, on two workers, must
    # each answer and log with their own facts only.
    from concurrent.futures import ThreadPoolExecutor

    gw = gateway_factory(workers=2)
    snap = helpers.make_snapshot(1, {"chat-demo": (5000, [backends["openai-a"].entry(1)])})
    helpers.add_planned(snap, PLAN_KEY, {"rate_per_second": 1000, "burst": 100000})
    assert gw.push(snap).status_code == 200
    kinds = {  # kind -> (key, model, status, consumer in the log line, plan)
        "plan": (PLAN_KEY, "chat-demo", 200, "planned", "p"),
        "plain": (helpers.KEY, "chat-demo", 200, "alice", "none"),
        "unknown": (helpers.KEY, "nope", 404, "alice", "none"),
        "nokey": (None, "chat-demo", 401, "", ""),
    }
    order = [k for _ in range(40) for k in kinds]

    def call(i_kind):
        i, kind = i_kind
        key, model, _, _, _ = kinds[kind]
        r = helpers.chat(gw, model=model, key=key, headers={"X-Request-Id": f"ctx-{i}-{kind}"})
        return i, kind, r

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, enumerate(order)))
    for i, kind, r in results:
        _, _, status, _, _ = kinds[kind]
        assert r.status_code == status, (kind, r.text)
        assert r.headers["X-Request-Id"] == f"ctx-{i}-{kind}"
        assert ("X-RateLimit-Limit" in r.headers) == (kind == "plan"), (kind, r.headers)
    lines = {line["request_id"]: line for line in access_lines(gw, len(order))}
    for i, kind, _ in results:
        _, model, status, consumer, plan = kinds[kind]
        line = lines[f"ctx-{i}-{kind}"]
        assert (line["status"], line["consumer"], line["plan"]) == (str(status), consumer, plan)
        assert line["model"] == (model if status == 200 else "")
        assert line["error_type"] == {200: "", 404: "not_found", 401: "unauthorized"}[status]
