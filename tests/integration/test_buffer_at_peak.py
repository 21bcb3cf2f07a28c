"""Buffering at peak (issue 14): a best-effort request of a plan with buffer_at_peak
that a saturated pool would refuse (503) becomes an async job instead (202 +
Location + the job), run by `sluice worker` through the gateway once the pool has
room. Real gateway, controller, PostgreSQL, RabbitMQ, worker and demo backend."""
from __future__ import annotations

import json
import threading

import requests

from jobs_harness import job
from waiting import eventually


def _narrow(stack):
    """A model whose one backend takes one request at a time."""
    url = stack.start_backend("one-slot")
    model = stack.admin.create("models", name="narrow", timeout_ms=30000)
    stack.admin.create("backends", name="one-slot", model_id=model["id"], url=url,
                       protocol="openai", max_in_flight=1)
    return url


def _consumer(stack, name: str, **plan) -> str:
    admin = stack.admin
    p = admin.create("plans", name=name, **plan)
    consumer = admin.create("consumers", name=name, plan_id=p["id"])
    return admin.create("keys", consumer_id=consumer["id"], name="ci")["key"]


def _chat(stack, key: str, text: str = "hello", headers: dict | None = None,
          timeout: float = 10) -> requests.Response:
    return requests.post(stack.gateway.url + "/v1/chat/completions", timeout=timeout,
                         json={"model": "narrow",
                               "messages": [{"role": "user", "content": text}]},
                         headers={"Authorization": f"Bearer {key}", **(headers or {})})


class _Held:
    """An interactive request (alice: no plan, standard class) held by the demo
    backend, so the pool is saturated until release()."""

    def __init__(self, stack, url: str, token: str):
        self.stack, self.url, self.token = stack, url, token
        self.answers: list[requests.Response] = []
        _, key = stack.keys["alice"]
        self.thread = threading.Thread(target=lambda: self.answers.append(_chat(
            stack, key, headers={"X-Demo-Hold": token}, timeout=60)), daemon=True)
        self.thread.start()
        metrics = stack.gateway.internal_url + "/metrics"
        eventually(lambda: 'sluice_backend_in_flight{model="narrow",backend="one-slot"} 1'
                   in requests.get(metrics, timeout=5, headers={
                       "Authorization": f"Bearer {stack.gateway_token}"}).text, timeout=10)

    def release(self) -> None:
        requests.post(f"{self.url}/demo/release/{self.token}", timeout=5)
        self.thread.join(30)
        assert [r.status_code for r in self.answers] == [200]


def test_best_effort_requests_become_jobs_at_peak_and_quotas_count_once(own_jobs_stack):
    """Daily quota 2: two requests buffered at peak both end in the model's answer
    (the buffering gave back what the plan counted; the job's run counts it once),
    and a third, synchronous and with room, is refused by the quota."""
    stack = own_jobs_stack   # each builds the model narrow and saturates it
    url = _narrow(stack)
    key = _consumer(stack, "patient-bulk", priority="best_effort", buffer_at_peak=True,
                    daily_requests=2)
    assert stack.admin.find("plans", "patient-bulk")["buffer_at_peak"] is True
    stack.wait_served()

    held = _Held(stack, url, "peak")
    try:
        ids = []
        for text in ("first", "second"):
            r = _chat(stack, key, text)
            assert r.status_code == 202, r.text
            body = r.json()
            assert r.headers["Location"] == f"/v1/jobs/{body['id']}"
            assert "Preference-Applied" not in r.headers   # the caller did not ask
            assert body["status"] == "queued" and body["model"] == "narrow"
            assert body["priority"] == "best_effort"
            ids.append(body["id"])
        # the worker tries, finds no room (503) and waits: nothing runs over the slot
        eventually(lambda: (j := job(stack.gateway.url, key, ids[0]).json())["attempts"] >= 1
                   and j["status"] in ("queued", "running"), timeout=20)
    finally:
        held.release()

    def ended():
        js = [job(stack.gateway.url, key, i).json() for i in ids]
        return all(j["status"] in ("succeeded", "failed") for j in js) and js

    js = eventually(ended, timeout=40)
    assert [j["status"] for j in js] == ["succeeded", "succeeded"], [(j.get("error"), j.get("result")) for j in js]
    for j in js:
        answer = j["result"]["body"]
        assert j["result"]["status_code"] == 200
        assert answer["object"] == "chat.completion"
        assert answer["choices"][0]["message"]["content"]

    # the quota of 2 gave exactly 2 answers: the next request, with room, is refused
    r = _chat(stack, key, "third")
    assert r.status_code == 429, r.text
    assert "daily request quota" in r.json()["error"]["message"]


def test_without_the_flag_or_above_best_effort_requests_are_refused_as_before(own_jobs_stack):
    """No flag, or a standard class: 503 as before. A caller of a buffering plan who
    lowers itself to best_effort is buffered, also through a route (the job names the
    route, and its run is routed again)."""
    stack = own_jobs_stack   # each builds the model narrow and saturates it
    url = _narrow(stack)
    plain = _consumer(stack, "bulk", priority="best_effort")
    standard = _consumer(stack, "std-buffer", priority="standard", queue_timeout_ms=0,
                         buffer_at_peak=True)
    lowered = _consumer(stack, "lowering", priority="standard", priority_header=True,
                        queue_timeout_ms=0, buffer_at_peak=True)
    stack.admin.create("routes", name="bulk", versions=[{"model": "narrow", "percent": 100}])
    stack.wait_served()

    held = _Held(stack, url, "peak2")
    try:
        for key in (plain, standard):
            r = _chat(stack, key)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["type"] == "backend_unavailable"
            assert "Location" not in r.headers
        # a caller of a buffering plan that lowers itself to best_effort is buffered
        r = _chat(stack, lowered, headers={"X-Sluice-Priority": "best_effort"})
        assert r.status_code == 202, r.text
        ids = [r.json()["id"]]
        # through a route: the job names the route, which chooses again when it runs
        r = requests.post(stack.gateway.url + "/v1/chat/completions", timeout=10,
                          json={"model": "bulk", "messages": [{"role": "user",
                                                               "content": "via route"}]},
                          headers={"Authorization": f"Bearer {lowered}",
                                   "X-Sluice-Priority": "best_effort"})
        assert r.status_code == 202, r.text
        assert r.json()["model"] == "bulk"
        ids.append(r.json()["id"])
    finally:
        held.release()
    for job_id in ids:
        done = eventually(lambda: (j := job(stack.gateway.url, lowered, job_id).json())
                          ["status"] == "succeeded" and j, timeout=40)
        assert done["result"]["status_code"] == 200

    # the job's run went through the route (its body names the route again)
    log = stack.gateway.prefix / "logs" / "access.log"

    def routed():
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        return [x for x in lines if x["route"] == "bulk" and x["status"] == "200"]
    assert eventually(routed, timeout=10)[0]["model"] == "narrow"
