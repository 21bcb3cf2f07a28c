"""The queue at saturation configured on the control plane (a plan's
queue_timeout_ms) and seen from it: GET /api/v1/queues and the dashboard read the
waiting requests from the live gateway."""
from __future__ import annotations

import json
import sys
import threading

import requests
from waiting import eventually

from control_plane.services import fleet_metrics


def test_waiting_request_is_visible_in_the_admin_api_and_dashboard(own_stack, demo):
    stack = own_stack  # its plan's name is the other test's too: a stack of its own
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


def _gpu(path, free: float) -> None:
    total = 80_000
    path.write_text(json.dumps({"gpus": [{"name": "NVIDIA A100-SXM4-80GB",
                                          "memory_total_mb": total,
                                          "memory_used_mb": int(total * (1 - free))}]}))


def test_full_gpus_make_requests_wait_until_memory_frees(stack):
    """No max_in_flight anywhere: a real agent reports the backend's GPU full, the
    controller's weight push says so, the gateway queues; memory frees, it serves."""
    admin = stack.admin
    url = stack.start_backend("gpu-a")
    model = admin.create("models", name="gpu-chat", timeout_ms=5000)
    backend = admin.create("backends", name="gpu-a", model_id=model["id"], url=url,
                           protocol="openai")
    plan = admin.create("plans", name="patient", queue_timeout_ms=60000)
    consumer = admin.create("consumers", name="t", plan_id=plan["id"])
    key = admin.create("keys", consumer_id=consumer["id"])["key"]
    stack.wait_served()

    gpus, cfg = stack.tmp / "gpus.json", stack.tmp / "agent.json"
    _gpu(gpus, 0.0)
    cfg.write_text(json.dumps({"host": "gpu-host-1", "backends": {"0": ["gpu-a"]}}))
    stack.spawn("agent", [sys.executable, "-m", "control_plane.cli", "agent",
                          "--source", "simulated", "--simulated-gpus", str(gpus),
                          "--config", str(cfg), "--interval", "0.5",
                          "--control-plane", f"http://127.0.0.1:{stack.api_port}"])
    # the controller's push names the backend saturated
    eventually(lambda: stack.gateway.weights_status()["saturated"] == [str(backend["id"])],
               timeout=30)

    answers: list[requests.Response] = []
    waiter = threading.Thread(target=lambda: answers.append(requests.post(
        stack.gateway.url + "/v1/chat/completions", timeout=60,
        json={"model": "gpu-chat", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {key}"})), daemon=True)
    waiter.start()
    eventually(lambda: stack.gateway.stats()["queues"]["gpu-chat"]["standard"] == 1,
               timeout=15)
    assert answers == []
    _gpu(gpus, 0.5)   # the model server freed memory
    waiter.join(60)
    assert [r.status_code for r in answers] == [200]
