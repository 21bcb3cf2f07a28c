"""Circuit-breaker settings and priority admission configured on the control plane,
enforced by the gateway after a push."""
from __future__ import annotations

import signal
import threading
import time

import requests

BREAKER = {"SLUICE_BREAKER_WINDOW_S": "30", "SLUICE_BREAKER_ERROR_RATE": "0.5",
           "SLUICE_BREAKER_MIN_REQUESTS": "4", "SLUICE_BREAKER_COOLDOWN_S": "1"}


def _loaded_at(gateway) -> float:
    return gateway.snapshot_status()["loaded_at"]


def _until(check, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


def _metrics(stack) -> str:
    return requests.get(stack.gateway.internal_url + "/metrics", timeout=5,
                        headers={"Authorization": f"Bearer {stack.gateway_token}"}).text


def test_breaker_settings_open_and_close_the_circuit(own_stack, demo):
    stack = own_stack  # it opens the demo backend's circuit: a stack of its own
    # The controller's settings (SLUICE_CONFIG, re-read on SIGHUP) go out in the snapshot.
    before = _loaded_at(stack.gateway)
    with stack.config_file.open("a") as fh:
        fh.writelines(f"{k}={v}\n" for k, v in BREAKER.items())
    stack.children["controller"].send_signal(signal.SIGHUP)
    _until(lambda: _loaded_at(stack.gateway) > before, what="the re-push")

    key, backend_id = demo["key"]["key"], str(demo["backend"]["id"])

    def circuit():
        return stack.gateway.stats()["backends"][backend_id]["circuit"]

    # four failures of four: over 50 % of at least 4 requests (the default needs 20)
    for _ in range(4):
        r = stack.chat(key, "chat-demo", headers={"X-Demo-Status": "500"})
        assert r.status_code == 502, r.text
    _until(lambda: circuit() == "open", what="the circuit to open")
    assert 'sluice_backend_circuit_state{model="chat-demo",backend="chat-a"} 1' \
        in _metrics(stack)
    r = stack.chat(key, "chat-demo")
    err = r.json()["error"]
    assert (r.status_code, err["type"]) == (503, "backend_unavailable"), r.text
    assert err["retry_after"] >= 1 and int(r.headers["Retry-After"]) >= 1

    # after the 1 s cooldown a probe goes through, succeeds, and closes the circuit
    _until(lambda: stack.chat(key, "chat-demo").status_code == 200, what="a probe")
    _until(lambda: circuit() == "closed", what="the circuit to close")
    assert 'sluice_backend_circuit_state{model="chat-demo",backend="chat-a"} 0' \
        in _metrics(stack)


def test_priority_configured_through_admin_api_sheds_best_effort(own_stack, demo):
    stack = own_stack  # it caps the demo's backend: a stack of its own
    admin = stack.admin
    batch = admin.create("plans", name="batch", priority="best_effort")
    admin.update("consumers", demo["consumer"]["id"], plan_id=batch["id"])
    vip = admin.create("consumers", name="vip",
                       plan_id=admin.create("plans", name="vip", priority="critical")["id"])
    vip_key = admin.create("keys", consumer_id=vip["id"], name="ci")["key"]
    admin.update("backends", demo["backend"]["id"], max_in_flight=1)
    stack.wait_served()

    token = "it-admission"
    held = threading.Thread(target=stack.chat, args=(vip_key, "chat-demo"),
                            kwargs={"headers": {"X-Demo-Hold": token}}, daemon=True)
    held.start()
    backend_id = str(demo["backend"]["id"])
    try:
        _until(lambda: stack.gateway.stats()["backends"][backend_id]["in_flight"] == 1,
               what="the held request")
        r = stack.chat(demo["key"]["key"], "chat-demo")
        assert r.status_code == 503 and "saturated" in r.json()["error"]["message"], r.text
        assert stack.chat(vip_key, "chat-demo").status_code == 200
    finally:
        requests.post(f"{demo['backend_url']}/demo/release/{token}", timeout=5)
        held.join(10)
    _until(lambda: stack.gateway.stats()["backends"][backend_id]["in_flight"] == 0,
           what="the count to come back")
    assert stack.chat(demo["key"]["key"], "chat-demo").status_code == 200
