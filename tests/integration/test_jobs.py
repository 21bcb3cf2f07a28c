"""Async jobs end to end (issue 14): Prefer: respond-async through a real gateway,
the job in PostgreSQL and RabbitMQ, `sluice worker` sending it back through the
gateway, the result by GET /v1/jobs/{id} and by a signed webhook to a real receiver."""
from __future__ import annotations

import requests

from jobs_harness import job, submit, verify
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
