"""Priority admission: a saturated pool refuses best-effort traffic first, standard
at capacity, critical only past a headroom; in-flight counts always come back."""
from __future__ import annotations

import secrets
import threading
import time

import pytest
import requests
from waiting import eventually

KEYS = {"critical": "sk-test-critical-0123456789abcdef",
        "standard": "sk-test-standard-0123456789abcdef",
        "best_effort": "sk-test-besteffort-0123456789abcdef",
        "chooser": "sk-test-chooser-0123456789abcdef"}
PLANS = {"1": {"id": 1, "name": "critical", "priority": "critical"},
         "2": {"id": 2, "name": "standard", "priority": "standard"},
         "3": {"id": 3, "name": "best-effort", "priority": "best_effort"},
         # standard, but the caller may lower its class per request
         "4": {"id": 4, "name": "chooser", "priority": "standard", "priority_header": True}}
PLAN_OF = {"critical": 1, "standard": 2, "best_effort": 3, "chooser": 4}


def _snapshot(helpers, backends, **backend_over):
    consumers, keys = {}, {}
    for i, (name, key) in enumerate(KEYS.items(), start=1):
        consumers[str(i)] = {"id": i, "name": name, "allowed_models": None,
                             "plan_id": PLAN_OF[name]}
        keys[helpers.key_hash(key)] = {"id": i, "consumer_id": i, "prefix": key[:10],
                                       "expires_at": None}
    entry = backends["openai-a"].entry(1, **backend_over)
    snap = helpers.make_snapshot(1, {"chat-demo": (3000, [entry])}, consumers=consumers,
                                 keys=keys)
    snap["plans"] = PLANS
    return snap


def _in_flight(own_gateway) -> int:
    return own_gateway.stats()["backends"]["1"]["in_flight"]


def wait_for(check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


class Held:
    """Requests kept in flight at the demo backend until release()."""

    def __init__(self, own_gateway, helpers, backend_url):
        self.own_gateway, self.helpers, self.backend_url = own_gateway, helpers, backend_url
        self.token = secrets.token_hex(8)
        self.threads: list[threading.Thread] = []
        self.statuses: list[int] = []

    def send(self, cls: str, n: int = 1, **headers) -> None:
        def one():
            r = self.helpers.chat(self.own_gateway, key=KEYS[cls],
                                  headers={"X-Demo-Hold": self.token, **headers})
            self.statuses.append(r.status_code)
        for _ in range(n):
            t = threading.Thread(target=one, daemon=True)
            t.start()
            self.threads.append(t)

    def release(self) -> None:
        requests.post(f"{self.backend_url}/demo/release/{self.token}", timeout=5)
        for t in self.threads:
            t.join(10)


@pytest.fixture
def held(own_gateway, helpers, backends):
    h = Held(own_gateway, helpers, f"http://127.0.0.1:{backends['openai-a'].port}")
    yield h
    h.release()


def test_saturated_pool_sheds_best_effort_first(own_gateway, helpers, backends, held):
    assert own_gateway.push(_snapshot(helpers, backends, max_in_flight=4)).status_code == 200
    held.send("standard", 3)
    assert wait_for(lambda: _in_flight(own_gateway) == 3)

    # 3 of 4 in flight: past best-effort's share (80 %), below capacity
    err = helpers.assert_error(helpers.chat(own_gateway, key=KEYS["best_effort"]), 503,
                               "backend_unavailable")
    assert err["retry_after"] == 1
    assert "saturated" in err["message"] and "best_effort" in err["message"]
    assert helpers.chat(own_gateway, key=KEYS["standard"]).status_code == 200

    held.send("critical")
    assert wait_for(lambda: _in_flight(own_gateway) == 4)
    r = helpers.chat(own_gateway, key=KEYS["standard"])
    helpers.assert_error(r, 503, "backend_unavailable")
    assert r.headers["Retry-After"] == "1"
    r = helpers.chat(own_gateway, key=KEYS["critical"])
    assert r.status_code == 200, r.text

    # critical's headroom (capacity + 25 %: 5) is the last line
    held.send("critical")
    assert wait_for(lambda: _in_flight(own_gateway) == 5)
    helpers.assert_error(helpers.chat(own_gateway, key=KEYS["critical"]), 503,
                         "backend_unavailable")

    held.release()
    assert held.statuses == [200] * 5
    assert wait_for(lambda: _in_flight(own_gateway) == 0)
    assert helpers.chat(own_gateway, key=KEYS["best_effort"]).status_code == 200

    def scrape():
        return requests.get(own_gateway.internal_url + "/metrics", timeout=5,
                            headers={"Authorization": f"Bearer {own_gateway.cfg.token}"}).text
    metrics = scrape()
    assert 'sluice_requests_shed_total{model="chat-demo",priority="best_effort"} 1' in metrics
    assert 'sluice_requests_shed_total{model="chat-demo",priority="standard"} 1' in metrics
    assert 'sluice_requests_shed_total{model="chat-demo",priority="critical"} 1' in metrics
    # the gauge is read at scrape time: the last answer's log phase (which gives its
    # count back) may still be running in the other worker when the client has it
    eventually(lambda: 'sluice_backend_in_flight{model="chat-demo",backend="openai-a"} 0'
               in scrape(), timeout=10)


def test_no_capacity_means_no_shedding(own_gateway, helpers, backends, held):
    assert own_gateway.push(_snapshot(helpers, backends)).status_code == 200
    held.send("standard", 6)
    assert wait_for(lambda: _in_flight(own_gateway) == 6)
    assert helpers.chat(own_gateway, key=KEYS["best_effort"]).status_code == 200


def test_header_may_lower_the_class_never_raise_it(own_gateway, helpers, backends, held):
    assert own_gateway.push(_snapshot(helpers, backends, max_in_flight=4)).status_code == 200
    held.send("standard", 4)
    assert wait_for(lambda: _in_flight(own_gateway) == 4)

    def chooser(priority):
        return helpers.chat(own_gateway, key=KEYS["chooser"],
                            headers={"X-Sluice-Priority": priority})

    # asking for critical gets the plan's standard: refused at capacity
    helpers.assert_error(chooser("critical"), 503, "backend_unavailable")
    helpers.assert_error(chooser("urgent"), 400, "invalid_request")
    # the header is ignored where the plan does not allow it
    r = helpers.chat(own_gateway, key=KEYS["critical"],
                     headers={"X-Sluice-Priority": "best_effort"})
    assert r.status_code == 200, r.text

    held.release()
    assert wait_for(lambda: _in_flight(own_gateway) == 0)
    held.token = secrets.token_hex(8)
    held.send("standard", 3)
    assert wait_for(lambda: _in_flight(own_gateway) == 3)
    assert chooser("standard").status_code == 200
    helpers.assert_error(chooser("best_effort"), 503, "backend_unavailable")


def test_in_flight_returns_to_zero_after_errors_timeouts_and_aborts(
        own_gateway, helpers, backends, dead_port, held):
    snap = _snapshot(helpers, backends, max_in_flight=4)
    snap["models"]["chat-demo"]["timeout_ms"] = 500
    # a dead backend beside the live one: connect failures are retried there
    snap["models"]["chat-demo"]["backends"].append(
        {**backends["openai-a"].entry(2), "port": dead_port, "name": "dead"})
    snap["breaker"] = {"min_requests": 1000}
    assert own_gateway.push(snap).status_code == 200

    for _ in range(4):   # one of the two tries goes to the dead backend first
        assert helpers.chat(own_gateway, key=KEYS["standard"]).status_code == 200
    r = helpers.chat(own_gateway, key=KEYS["standard"], headers={"X-Demo-Status": "500"})
    # the backend's 500 is retried (proxy_next_upstream): when the retry is the dead
    # backend's connect failure, nginx's own 502 answers; else the backend's own, in
    # the template with its OpenAI type. Which comes second depends on each worker's
    # round-robin state, which the requests above left as their worker spread made it.
    err = r.json()["error"]
    assert r.status_code == 502 and err["type"] in ("server_error", "backend_error"), r.text
    r = helpers.chat(own_gateway, key=KEYS["standard"], headers={"X-Demo-Hold": held.token})
    helpers.assert_error(r, 504, "backend_timeout")
    with pytest.raises(requests.Timeout):   # the caller gives up and hangs up
        requests.post(own_gateway.url + "/v1/chat/completions", timeout=0.3,
                      headers={"Authorization": f"Bearer {KEYS['standard']}",
                               "X-Demo-Hold": held.token, "X-Demo-Latency-Ms": "0"},
                      json={"model": "chat-demo", "messages": [{"role": "user",
                                                                "content": "hi"}]})
    stats = wait_for(lambda: (s := own_gateway.stats()["backends"])["1"]["in_flight"] == 0
                     and s["2"]["in_flight"] == 0 and s)
    assert stats, own_gateway.stats()
    assert stats["2"]["failures"] >= 1   # the dead backend was tried


def test_invalid_admission_fields_are_refused(own_gateway, helpers, backends):
    snap = _snapshot(helpers, backends, max_in_flight=0)
    r = own_gateway.push(snap)
    assert r.status_code == 400 and "max_in_flight" in r.json()["error"]["message"]
    snap = _snapshot(helpers, backends)
    snap["plans"] = {**PLANS, "3": {**PLANS["3"], "priority": "urgent"}}
    r = own_gateway.push(snap)
    assert r.status_code == 400 and "plans.3.priority" in r.json()["error"]["message"]
    snap["plans"] = {**PLANS, "3": {**PLANS["3"], "buffer_at_peak": "yes"}}
    r = own_gateway.push(snap)
    assert r.status_code == 400 and "plans.3.buffer_at_peak" in r.json()["error"]["message"]
