"""The queue at saturation: a request its class would refuse waits for a slot, up to
its plan's queue_timeout_ms, served by class, round robin between consumers of one
class; a critical request takes the newest best-effort waiter's place in a full
queue; a caller that hangs up leaves the queue. Real nginx (several workers), the
real demo backend with max_in_flight 1, so one held request saturates the pool."""
from __future__ import annotations

import secrets
import threading

import requests
from gateway_readings import access_lines, scrape, value
from waiting import eventually

WAIT_MS = 30000   # long bounds: the tests release the slot well before
PLANS = {"1": {"id": 1, "name": "critical", "priority": "critical",
               "queue_timeout_ms": WAIT_MS},
         "2": {"id": 2, "name": "standard", "priority": "standard",
               "queue_timeout_ms": WAIT_MS},
         "3": {"id": 3, "name": "best-effort", "priority": "best_effort",
               "queue_timeout_ms": WAIT_MS},
         "4": {"id": 4, "name": "impatient", "priority": "standard",
               "queue_timeout_ms": 300},
         "5": {"id": 5, "name": "no-wait", "priority": "best_effort"}}
CONSUMERS = {"critical": 1, "standard": 2, "standard-b": 2, "best_effort": 3,
             "impatient": 4, "no-wait": 5, "holder": 2, "critical-holder": 1}
KEYS = {name: f"sk-test-queue-{name}-0123456789abcdef" for name in CONSUMERS}


def _snapshot(helpers, backends, version=1, capacity=1):
    consumers, keys = {}, {}
    for i, (name, plan) in enumerate(CONSUMERS.items(), start=1):
        consumers[str(i)] = {"id": i, "name": name, "allowed_models": None, "plan_id": plan}
        keys[helpers.key_hash(KEYS[name])] = {"id": i, "consumer_id": i,
                                              "prefix": KEYS[name][:10], "expires_at": None}
    entry = backends["openai-a"].entry(1, **({"max_in_flight": capacity} if capacity else {}))
    snap = helpers.make_snapshot(version, {"chat-demo": (60000, [entry])},
                                 consumers=consumers, keys=keys)
    snap["plans"] = PLANS
    return snap


def _depth(own_gateway) -> dict:
    return own_gateway.stats()["queues"]["chat-demo"]


def _in_flight(own_gateway) -> int:
    return own_gateway.stats()["backends"]["1"]["in_flight"]


class Traffic:
    """Requests sent from threads; `done` lists (who, response) in the order the
    answers came back."""

    def __init__(self, own_gateway, backend_url):
        self.own_gateway, self.backend_url = own_gateway, backend_url
        self.hold = secrets.token_hex(8)
        self.lock = threading.Lock()
        self.done: list[tuple[str, requests.Response]] = []
        self.threads: list[threading.Thread] = []

    def post(self, who, headers=None, timeout=60):
        h = {"Authorization": f"Bearer {KEYS[who]}", **(headers or {})}
        return requests.post(self.own_gateway.url + "/v1/chat/completions", timeout=timeout,
                             headers=h, json={"model": "chat-demo", "messages": [
                                 {"role": "user", "content": "hello there"}]})

    def send(self, who, n=1, held=False, latency_ms=40):
        headers = {"X-Demo-Latency-Ms": str(latency_ms)}
        if held:
            headers["X-Demo-Hold"] = self.hold

        def one():
            r = self.post(who, headers)
            with self.lock:
                self.done.append((who, r))
        for _ in range(n):
            t = threading.Thread(target=one, daemon=True)
            t.start()
            self.threads.append(t)

    def release(self):
        requests.post(f"{self.backend_url}/demo/release/{self.hold}", timeout=5)

    def join(self):
        self.release()
        for t in self.threads:
            t.join(60)
        assert not any(t.is_alive() for t in self.threads)


def _traffic(own_gateway, backends):
    return Traffic(own_gateway, f"http://127.0.0.1:{backends['openai-a'].port}")


def _queued(own_gateway, **want):
    """Wait until the queue of chat-demo holds exactly `want` (class -> count)."""
    eventually(lambda: all(_depth(own_gateway)[c] == n for c, n in want.items()),
               timeout=15, message=f"queue depth {want}")


def _order(done, skip=("holder", "critical-holder")):
    return [who for who, r in done if who not in skip]


def test_waiters_are_served_by_class_in_several_workers(gateway_factory, helpers, backends):
    own_gateway = gateway_factory(workers=4)
    assert own_gateway.push(_snapshot(helpers, backends)).status_code == 200
    t = _traffic(own_gateway, backends)
    try:
        # two held critical requests: the slot and critical's headroom are taken
        t.send("critical-holder", 2, held=True)
        eventually(lambda: _in_flight(own_gateway) == 2)
        # arrivals low class first: without the queue's order they would be served so
        for who in ("best_effort", "standard", "critical"):
            t.send(who, 4)
        _queued(own_gateway, best_effort=4, standard=4, critical=4)
        assert _in_flight(own_gateway) == 2   # a waiter holds no slot
    finally:
        t.join()
    assert all(r.status_code == 200 for _, r in t.done), [r.text for _, r in t.done]
    waiters = _order(t.done)
    print("served in order:", waiters)
    assert waiters == ["critical"] * 4 + ["standard"] * 4 + ["best_effort"] * 4
    # request ids made here start with a per-worker prefix: waiters of several
    # workers took part (the cross-worker wake-up, not only the local semaphore)
    workers = {r.headers["X-Request-Id"][:16] for _, r in t.done}
    print("workers seen:", len(workers))
    assert len(workers) >= 2
    assert _depth(own_gateway) == {"critical": 0, "standard": 0, "best_effort": 0}
    eventually(lambda: _in_flight(own_gateway) == 0)


def test_consumers_of_one_class_share_the_slots(own_gateway, helpers, backends):
    """Consumer A keeps 8 requests waiting, B keeps 2: first come first served would
    give B a fifth of the slots; round robin between consumers gives it about half."""
    assert own_gateway.push(_snapshot(helpers, backends)).status_code == 200
    t = _traffic(own_gateway, backends)
    stop = threading.Event()
    counts = {"standard": 0, "standard-b": 0}

    def loop(who):
        while not stop.is_set():
            r = t.post(who, {"X-Demo-Latency-Ms": "15"})
            assert r.status_code == 200, r.text
            with t.lock:
                counts[who] += 1
                if sum(counts.values()) >= 120:
                    stop.set()

    t.send("holder", held=True)
    eventually(lambda: _in_flight(own_gateway) == 1)
    loops = [threading.Thread(target=loop, args=(who,), daemon=True)
             for who in ["standard"] * 8 + ["standard-b"] * 2]
    for th in loops:
        th.start()
    try:
        _queued(own_gateway, standard=10)
    finally:
        t.release()
        for th in loops:
            th.join(120)
        t.join()
    print("served per consumer:", counts)
    total = sum(counts.values())
    assert total >= 120
    assert counts["standard-b"] >= 0.35 * total, counts


def test_critical_takes_the_newest_best_effort_place_in_a_full_queue(
        own_gateway, helpers, backends):
    assert own_gateway.push(_snapshot(helpers, backends)).status_code == 200
    t = _traffic(own_gateway, backends)
    try:
        t.send("critical-holder", 2, held=True)
        eventually(lambda: _in_flight(own_gateway) == 2)
        # 16 places for a capacity of 1 (at least 16, 4 per slot)
        t.send("best_effort")
        _queued(own_gateway, best_effort=1)
        t.send("best_effort")
        _queued(own_gateway, best_effort=2)
        t.send("standard", 14)
        _queued(own_gateway, best_effort=2, standard=14)

        t.send("critical")
        preempted = eventually(lambda: [r for who, r in t.done if who == "best_effort"])
        _queued(own_gateway, best_effort=1, standard=14, critical=1)
        # a standard request finds the queue full: refused at once
        full = t.post("standard")
    finally:
        t.join()
    err = helpers.assert_error(preempted[0], 503, "backend_unavailable")
    assert err["retry_after"] == 1 and preempted[0].headers["Retry-After"] == "1"
    assert "critical" in err["message"]
    err = helpers.assert_error(full, 503, "backend_unavailable")
    assert "queue is full" in err["message"] and err["retry_after"] == 1
    # the older best-effort waiter kept its place and was served last
    served = [who for who, r in t.done if r.status_code == 200 and who != "critical-holder"]
    assert served == ["critical"] + ["standard"] * 14 + ["best_effort"], served
    m = scrape(own_gateway)
    assert value(m, "sluice_queue_outcomes_total", model="chat-demo",
                 priority="best_effort", outcome="preempted") == 1
    assert value(m, "sluice_queue_outcomes_total", model="chat-demo",
                 priority="standard", outcome="full") == 1


def test_wait_bounds_per_class(own_gateway, helpers, backends):
    assert own_gateway.push(_snapshot(helpers, backends)).status_code == 200
    t = _traffic(own_gateway, backends)
    try:
        t.send("holder", held=True)
        eventually(lambda: _in_flight(own_gateway) == 1)
        # best-effort without a wait: refused at once, as without the queue
        r = t.post("no-wait", {"X-Request-Id": "queue-no-wait"})
        err = helpers.assert_error(r, 503, "backend_unavailable")
        assert "best_effort requests are refused first" in err["message"]
        # a plan with 300 ms: it waits them out, then the same 503
        r = t.post("impatient", {"X-Request-Id": "queue-impatient"})
        err = helpers.assert_error(r, 503, "backend_unavailable")
        assert "no slot came free within 300 ms" in err["message"]
        assert err["retry_after"] == 1
        assert _depth(own_gateway)["standard"] == 0
    finally:
        t.join()
    assert [r.status_code for _, r in t.done] == [200]
    lines = {line["request_id"]: line
             for line in access_lines(own_gateway, 3) if line["request_id"].startswith("queue-")}
    assert lines["queue-no-wait"]["queue_ms"] == ""          # it never waited
    # it waited its bound (to the millisecond: the wait ends when under 1 ms is left)
    assert int(lines["queue-impatient"]["queue_ms"]) >= 299
    assert lines["queue-impatient"]["status"] == "503"
    m = scrape(own_gateway)
    assert value(m, "sluice_queue_outcomes_total", model="chat-demo", priority="standard",
                 outcome="timeout") == 1
    assert value(m, "sluice_queue_wait_seconds_count", model="chat-demo",
                 priority="standard") == 1
    assert value(m, "sluice_queue_wait_seconds_sum", model="chat-demo",
                 priority="standard") >= 0.299


def test_a_caller_that_hangs_up_leaves_the_queue(own_gateway, helpers, backends):
    assert own_gateway.push(_snapshot(helpers, backends)).status_code == 200
    t = _traffic(own_gateway, backends)
    try:
        t.send("holder", held=True)
        eventually(lambda: _in_flight(own_gateway) == 1)
        try:
            t.post("standard", {"X-Request-Id": "queue-gone"}, timeout=0.5)
            raise AssertionError("a waiter was answered while the slot was held")
        except requests.Timeout:
            pass
        # the place is given up without waiting for the 30 s bound
        eventually(lambda: _depth(own_gateway)["standard"] == 0, timeout=10)
        t.send("standard")
        _queued(own_gateway, standard=1)
    finally:
        t.join()
    # the holder, then the one who stayed; nobody served the caller who left
    assert [(who, r.status_code) for who, r in t.done] == [("holder", 200), ("standard", 200)]
    eventually(lambda: _in_flight(own_gateway) == 0)
    line = next(line for line in access_lines(own_gateway, 3)
                if line["request_id"] == "queue-gone")
    assert line["status"] == "499" and line["backend"] == "" and int(line["queue_ms"]) >= 0
    m = scrape(own_gateway)
    assert value(m, "sluice_queue_outcomes_total", model="chat-demo", priority="standard",
                 outcome="aborted") == 1
    assert value(m, "sluice_queue_outcomes_total", model="chat-demo", priority="standard",
                 outcome="admitted") == 1


def test_queue_metrics_and_log_fields(own_gateway, helpers, backends):
    assert own_gateway.push(_snapshot(helpers, backends)).status_code == 200
    t = _traffic(own_gateway, backends)
    try:
        t.send("holder", held=True)
        eventually(lambda: _in_flight(own_gateway) == 1)
        t.send("standard", 2)
        _queued(own_gateway, standard=2)
        m = scrape(own_gateway)
        assert value(m, "sluice_queue_depth", model="chat-demo", priority="standard") == 2
        assert value(m, "sluice_queue_depth", model="chat-demo", priority="critical") == 0
    finally:
        t.join()
    assert [r.status_code for _, r in t.done] == [200] * 3
    waited = {r.headers["X-Request-Id"] for who, r in t.done if who == "standard"}
    lines = [line for line in access_lines(own_gateway, 3) if line["request_id"] in waited]
    assert len(lines) == 2 and all(int(line["queue_ms"]) >= 0 for line in lines)
    m = scrape(own_gateway)
    assert value(m, "sluice_queue_outcomes_total", model="chat-demo", priority="standard",
                 outcome="admitted") == 2
    assert value(m, "sluice_queue_wait_seconds_count", model="chat-demo",
                 priority="standard") == 2
    assert value(m, "sluice_queue_depth", model="chat-demo", priority="standard") == 0


def test_gpu_saturation_signal_makes_requests_wait(own_gateway, helpers, backends):
    """A backend without max_in_flight: only the controller's signal (its GPUs are
    full, in the weight push) saturates the pool."""
    assert own_gateway.push(_snapshot(helpers, backends, capacity=None)).status_code == 200
    t = _traffic(own_gateway, backends)
    try:
        r = own_gateway.push_weights({"version": 1, "weights": {"1": 100}, "hold_s": 600,
                                  "saturated": ["1"]})
        assert r.status_code == 200, r.text
        # idle and saturated: nothing more goes to it
        t.send("standard")
        _queued(own_gateway, standard=1)
        helpers.assert_error(t.post("no-wait"), 503, "backend_unavailable")
        assert t.done == []
        # the GPUs have room again: the waiter goes
        r = own_gateway.push_weights({"version": 2, "weights": {"1": 100}, "hold_s": 600})
        assert r.status_code == 200, r.text
        eventually(lambda: t.done)
        assert t.post("no-wait").status_code == 200
    finally:
        t.join()
    assert [(who, r.status_code) for who, r in t.done] == [("standard", 200)]
    r = own_gateway.push_weights({"version": 3, "weights": {}, "saturated": "1"})
    assert r.status_code == 400 and "saturated" in r.text


def test_invalid_queue_timeout_is_refused(own_gateway, helpers, backends):
    snap = _snapshot(helpers, backends)
    snap["plans"] = {**PLANS, "4": {**PLANS["4"], "queue_timeout_ms": -1}}
    r = own_gateway.push(snap)
    assert r.status_code == 400 and "plans.4.queue_timeout_ms" in r.json()["error"]["message"]
