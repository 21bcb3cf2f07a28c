"""The request context (lua/sluice/context.lua) crosses error_page redirects through
one registry entry per request, freed in the log phase: whatever the outcome, the
registry empties once requests are over (the sluice_request_contexts gauge)."""
import requests
from gateway_readings import scrape
from waiting import eventually


def _contexts_held(gw) -> list[float] | None:
    """Every worker's gauge, once each worker has published one."""
    samples = scrape(gw).get("sluice_request_contexts", [])
    return [s.value for s in samples] if len(samples) == gw.cfg.workers else None


def test_every_outcome_frees_its_context(gateway, helpers, backends, dead_port):
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
