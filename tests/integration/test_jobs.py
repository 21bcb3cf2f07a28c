"""Async jobs end to end (issue 14): Prefer: respond-async through a real gateway,
the job in PostgreSQL and RabbitMQ, `sluice worker` sending it back through the
gateway, the result by GET /v1/jobs/{id} and by a signed webhook to a real receiver."""
from __future__ import annotations

import threading

import pytest
import requests
from sluice_client import APIStatusError, NotFoundError, Sluice, verify_signature

from jobs_harness import job, start_worker, submit, verify
from waiting import eventually


def _secret(stack, consumer_id: int) -> str:
    r = requests.post(f"{stack.admin_url}/consumers/{consumer_id}/webhook-secret",
                      headers={"Authorization": f"Bearer {stack.admin_token}"}, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()["secret"]


def test_async_round_trip_with_a_signed_webhook(jobs_stack, receiver):
    stack = jobs_stack
    consumer, key = stack.keys["alice"]
    secret = _secret(stack, consumer["id"])

    r = submit(stack.gateway.url, key, "what is async?",
               headers={"X-Sluice-Callback-Url": receiver.url + "/hooks/sluice"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert r.headers["Location"] == f"/v1/jobs/{body['id']}"
    assert body["status"] == "queued" and body["model"] == "chat-demo"

    done = eventually(lambda: (j := job(stack.gateway.url, key, body["id"]).json())
                      ["status"] == "succeeded" and j, timeout=30)
    # the answer as the caller would have got it synchronously
    answer = done["result"]["body"]
    assert done["result"]["status_code"] == 200
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["content"]
    assert done["started_at"] >= done["created_at"] and done["finished_at"] >= done["started_at"]

    eventually(lambda: receiver.calls, timeout=20)
    path, headers, raw = receiver.calls[0]
    assert path == "/hooks/sluice"
    assert verify(secret, headers["X-Sluice-Signature"], raw)
    assert not verify("whsec_wrong", headers["X-Sluice-Signature"], raw)
    assert receiver.jobs()[0]["id"] == body["id"]
    assert receiver.jobs()[0]["result"]["body"]["object"] == "chat.completion"

    # the delivery is visible to operators
    r = requests.get(f"{stack.admin_url}/webhook-deliveries", params={"job": body["id"]},
                     headers={"Authorization": f"Bearer {stack.admin_token}"}, timeout=10)
    (delivery,) = r.json()["items"]
    assert delivery["status"] == "delivered" and delivery["attempts"] == 1


def test_a_caller_sees_only_its_own_jobs(jobs_stack):
    stack = jobs_stack
    _, alice = stack.keys["alice"]
    _, bob = stack.keys["bob"]
    r = submit(stack.gateway.url, alice, "mine")
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]

    assert job(stack.gateway.url, alice, job_id).status_code == 200
    for resp in (job(stack.gateway.url, bob, job_id),
                 requests.delete(f"{stack.gateway.url}/v1/jobs/{job_id}",
                                 headers={"Authorization": f"Bearer {bob}"}, timeout=10),
                 job(stack.gateway.url, alice, "job_0123456789abcdef01234567")):
        assert resp.status_code == 404, resp.text
        err = resp.json()["error"]
        assert err["type"] == "not_found" and err["request_id"] == resp.headers["X-Request-Id"]
    # no key: refused by the gateway before any job is looked at
    r = requests.get(f"{stack.gateway.url}/v1/jobs/{job_id}", timeout=10)
    assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
    # forged consumer headers change nothing: the gateway sets them
    r = requests.get(f"{stack.gateway.url}/v1/jobs/{job_id}", timeout=10,
                     headers={"Authorization": f"Bearer {bob}",
                              "X-Sluice-Consumer-Id": str(stack.keys["alice"][0]["id"]),
                              "X-Sluice-Gateway-Token": "forged-forged-forged"})
    assert r.status_code == 404
    # the jobs service itself answers gateways only, whatever headers come with it
    r = requests.get(f"http://127.0.0.1:{stack.api_port}/sluice-jobs/v1/jobs/{job_id}",
                     timeout=10, headers={"X-Sluice-Consumer-Id": str(
                         stack.keys["alice"][0]["id"]), "X-Sluice-Gateway-Token": "guess"})
    assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden"
    # a job is not an endpoint of any other method
    r = requests.put(f"{stack.gateway.url}/v1/jobs/{job_id}", timeout=10,
                     headers={"Authorization": f"Bearer {alice}"})
    assert r.status_code == 405 and r.headers["Allow"] == "GET, DELETE"


def test_cancel_a_queued_job(own_jobs_stack):
    stack = own_jobs_stack   # its worker is stopped; it counts every queued job
    _, key = stack.keys["alice"]
    stack.stop("worker")   # nothing runs: the job stays queued
    job_id = submit(stack.gateway.url, key, "never mind").json()["id"]
    # operators see the queue
    stats = requests.get(f"{stack.admin_url}/jobs/stats", timeout=10,
                         headers={"Authorization": f"Bearer {stack.admin_token}"}).json()
    assert stats["by_status"]["queued"] == 1
    assert stats["by_model"] == {"chat-demo": {"queued": 1, "running": 0}}
    assert stats["oldest_queued_s"] >= 0
    r = requests.delete(f"{stack.gateway.url}/v1/jobs/{job_id}",
                        headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "cancelled"
    r = requests.delete(f"{stack.gateway.url}/v1/jobs/{job_id}",
                        headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert r.status_code == 409 and r.json()["error"]["type"] == "conflict"

    # a worker comes; a job sent after the cancelled one runs, the cancelled one never
    start_worker(stack)
    later = submit(stack.gateway.url, key, "this one").json()["id"]
    eventually(lambda: job(stack.gateway.url, key, later).json()["status"] == "succeeded",
               timeout=30)
    cancelled = job(stack.gateway.url, key, job_id).json()
    assert cancelled["status"] == "cancelled" and "result" not in cancelled
    assert cancelled["started_at"] is None


def test_callback_urls_to_private_addresses_are_refused(own_jobs_stack, receiver):
    stack = own_jobs_stack   # its API restarts; it lists every job
    consumer, key = stack.keys["alice"]
    _secret(stack, consumer["id"])
    # the operator has not allowed private callbacks
    stack.stop("api")
    stack.extra_env["SLUICE_WEBHOOK_ALLOW_PRIVATE"] = "0"
    stack.start_api()
    for url in (receiver.url + "/hook", "http://localhost:9/x", "http://169.254.169.254/",
                "http://10.1.2.3/hook", "http://[::1]:8080/", "ftp://example.com/x"):
        r = submit(stack.gateway.url, key, headers={"X-Sluice-Callback-Url": url})
        assert r.status_code == 400, (url, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request" and "X-Sluice-Callback-Url" in err["message"]
    # nothing was accepted, nothing was called
    r = requests.get(f"{stack.admin_url}/jobs", timeout=10,
                     headers={"Authorization": f"Bearer {stack.admin_token}"})
    assert r.json()["items"] == []
    assert receiver.calls == []


def test_callbacks_need_the_consumers_webhook_secret(jobs_stack, receiver):
    stack = jobs_stack
    _, key = stack.keys["bob"]   # bob has no webhook secret
    r = submit(stack.gateway.url, key, headers={"X-Sluice-Callback-Url": receiver.url})
    assert r.status_code == 400
    assert "webhook secret" in r.json()["error"]["message"]


def test_quotas_apply_when_the_job_runs_not_at_submission(jobs_stack):
    """One request a day: two async submissions are both accepted (a submission is not
    an inference); when they run, one gets the answer and the other the gateway's 429."""
    stack = jobs_stack
    admin = stack.admin
    plan = admin.create("plans", name="one-a-day", daily_requests=1)
    consumer = admin.create("consumers", name="carol", plan_id=plan["id"])
    key = admin.create("keys", consumer_id=consumer["id"], name="ci")["key"]
    stack.wait_served()
    ids = []
    for text in ("first", "second"):
        r = submit(stack.gateway.url, key, text)
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])

    def ended():
        js = [job(stack.gateway.url, key, i).json() for i in ids]
        return all(j["status"] in ("succeeded", "failed") for j in js) and js

    js = eventually(ended, timeout=30)
    assert sorted(j["status"] for j in js) == ["failed", "succeeded"]
    failed = next(j for j in js if j["status"] == "failed")
    assert failed["result"]["status_code"] == 429
    assert failed["error"]["type"] == "rate_limited"


def test_webhook_retries_until_the_receiver_takes_it_and_can_be_resent(jobs_stack, receiver):
    stack = jobs_stack
    consumer, key = stack.keys["alice"]
    secret = _secret(stack, consumer["id"])
    receiver.status = 500
    job_id = submit(stack.gateway.url, key,
                    headers={"X-Sluice-Callback-Url": receiver.url}).json()["id"]
    eventually(lambda: len(receiver.calls) >= 2, timeout=30)   # retried
    receiver.status = 204
    auth = {"Authorization": f"Bearer {stack.admin_token}"}

    def delivered():
        (d,) = requests.get(f"{stack.admin_url}/webhook-deliveries", params={"job": job_id},
                            headers=auth, timeout=10).json()["items"]
        return d["status"] == "delivered" and d

    d = eventually(delivered, timeout=30)
    assert d["attempts"] >= 3 and d["last_status_code"] == 204
    # the operator sends it again: a new delivery, signed afresh
    before = len(receiver.calls)
    r = requests.post(f"{stack.admin_url}/webhook-deliveries/{d['id']}/resend",
                      headers=auth, timeout=10)
    assert r.status_code == 201 and r.json()["id"] != d["id"]
    eventually(lambda: len(receiver.calls) == before + 1, timeout=20)
    _, headers, raw = receiver.calls[-1]
    assert verify(secret, headers["X-Sluice-Signature"], raw)


def test_python_sdk_submit_wait_and_verify(jobs_stack, receiver):
    stack = jobs_stack
    consumer, key = stack.keys["alice"]
    secret = _secret(stack, consumer["id"])
    with Sluice(stack.gateway.url, key) as client:
        submitted = client.submit("chat-demo", [{"role": "user", "content": "sdk"}],
                                  callback_url=receiver.url)
        assert submitted["status"] == "queued"
        done = client.wait(submitted, timeout=30)
        assert done["status"] == "succeeded"
        assert done["result"]["body"]["choices"][0]["message"]["content"]
        with pytest.raises(NotFoundError):
            client.job("job_0000")
        # a queued job can be cancelled; an ended one cannot
        with pytest.raises(APIStatusError) as exc:
            client.cancel(done["id"])
        assert exc.value.code == 409
    eventually(lambda: receiver.calls, timeout=20)
    _, headers, raw = receiver.calls[0]
    assert verify_signature(secret, headers["X-Sluice-Signature"], raw)
    assert not verify_signature(secret, headers["X-Sluice-Signature"], raw + b"x")


def test_jobs_wait_while_the_models_pool_is_full(jobs_stack):
    """A backend that takes one request at a time, held by an interactive caller: the
    job is not run over it (the worker gets the gateway's 503 and waits), and runs
    once the slot is free."""
    stack = jobs_stack
    _, key = stack.keys["alice"]
    url = stack.start_backend("one-slot")
    model = stack.admin.create("models", name="narrow", timeout_ms=20000)
    stack.admin.create("backends", name="one-slot", model_id=model["id"], url=url,
                       protocol="openai", max_in_flight=1)
    stack.wait_served()
    held = {}
    interactive = threading.Thread(target=lambda: held.setdefault("r", stack.chat(
        key, "narrow", headers={"X-Demo-Hold": "slot"})))
    interactive.start()
    try:
        metrics = stack.gateway.internal_url + "/metrics"
        eventually(lambda: 'sluice_backend_in_flight{model="narrow",backend="one-slot"} 1'
                   in requests.get(metrics, timeout=5, headers={
                       "Authorization": f"Bearer {stack.gateway_token}"}).text, timeout=10)
        job_id = submit(stack.gateway.url, key, model="narrow").json()["id"]
        # tried, refused for want of room, queued again: more than once
        eventually(lambda: (j := job(stack.gateway.url, key, job_id).json())["attempts"] >= 2
                   and j["status"] in ("queued", "running"), timeout=20)
    finally:
        requests.post(url + "/demo/release/slot", timeout=5)
        interactive.join(30)
    assert held["r"].status_code == 200
    done = eventually(lambda: (j := job(stack.gateway.url, key, job_id).json())["status"]
                      == "succeeded" and j, timeout=20)
    assert done["result"]["status_code"] == 200
