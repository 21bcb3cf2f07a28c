"""The queue at saturation configured on the control plane (a plan's
queue_timeout_ms) and seen from it: GET /api/v1/queues and the dashboard read the
waiting requests from the live gateway."""
from __future__ import annotations

import threading

import requests
from waiting import eventually

from control_plane.services import fleet_metrics


def test_waiting_request_is_visible_in_the_admin_api_and_dashboard(stack, demo):
    admin = stack.admin
    patient = admin.create("plans", name="patient", priority="standard",
                           queue_timeout_ms=30000)
    admin.update("consumers", demo["consumer"]["id"], plan_id=patient["id"])
    vip = admin.create("consumers", name="vip",
                       plan_id=admin.create("plans", name="vip", priority="critical")["id"])
    vip_key = admin.create("keys", consumer_id=vip["id"], name="ci")["key"]
    admin.update("backends", demo["backend"]["id"], max_in_flight=1)
    stack.wait_served()
    backend_id = str(demo["backend"]["id"])

    token = "it-queue"
    answers: list[requests.Response] = []

    def send(key):
        answers.append(requests.post(
            stack.gateway.url + "/v1/chat/completions", timeout=60,
            json={"model": "chat-demo", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {key}", "X-Demo-Hold": token}))

    # the vip's two held requests take the slot and critical's headroom
    threads = [threading.Thread(target=send, args=(vip_key,), daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        eventually(lambda: stack.gateway.stats()["backends"][backend_id]["in_flight"] == 2)
        waiter = threading.Thread(target=send, args=(demo["key"]["key"],), daemon=True)
        waiter.start()
        threads.append(waiter)

        def queues():
            r = admin.session.get(stack.admin_url + "/queues", timeout=10)
            assert r.status_code == 200, r.text
            return r.json()
        doc = eventually(lambda: (d := queues())["models"].get("chat-demo", {}).get(
            "standard") == 1 and d)
        assert doc["models"]["chat-demo"] == {"critical": 0, "standard": 1,
                                              "best_effort": 0, "total": 1}
        assert [g["chat-demo"]["standard"] for g in doc["gateways"].values()] == [1]
        assert doc["unreachable"] == {}
        # the dashboard's "Waiting" column: the gateways' metrics as it sums them
        text = requests.get(stack.gateway.internal_url + "/metrics", timeout=10,
                            headers={"Authorization": f"Bearer {stack.gateway_token}"}).text
        assert fleet_metrics.summarize([text])["models"]["chat-demo"]["queued"] == 1
    finally:
        requests.post(f"{demo['backend_url']}/demo/release/{token}", timeout=5)
        for t in threads:
            t.join(30)
    assert sorted(r.status_code for r in answers) == [200, 200, 200]
    assert queues()["models"]["chat-demo"]["total"] == 0
