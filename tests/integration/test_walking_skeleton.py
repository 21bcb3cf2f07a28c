"""One request through the real gateway, configured from Postgres by the controller."""
from __future__ import annotations

import signal
import threading
import time

import requests


def test_request_configured_through_admin_api_reaches_backend(stack, demo):
    resp = stack.chat(demo["key"]["key"], "chat-demo", text="héllo 世界 🚀")

    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "echo: héllo 世界 🚀"
    assert resp.headers["X-Demo-Backend"] == "chat-a"
    assert resp.headers["X-Request-Id"]
    # The caller's key stops at the gateway.
    assert resp.headers["X-Demo-Saw-Authorization"] == "no"


def test_predict_endpoint_routes_by_path(stack):
    url = stack.start_backend("predict-a", protocol="predict")
    admin = stack.admin
    model = admin.create("models", name="sentiment")
    admin.create("backends", name="predict-a", model_id=model["id"], url=url,
                 protocol="predict")
    consumer = admin.create("consumers", name="team-b")
    key = admin.create("keys", consumer_id=consumer["id"], name="ci")["key"]
    stack.wait_served()

    resp = requests.post(stack.gateway.url + "/v1/models/sentiment/predict",
                         json={"instances": ["good", "bad"]},
                         headers={"X-API-Key": key}, timeout=10)

    assert resp.status_code == 200, resp.text
    assert resp.json()["model"] == "sentiment"
    assert resp.headers["X-Demo-Backend"] == "predict-a"


def test_admin_api_needs_the_token(stack):
    assert requests.get(stack.admin_url + "/models", timeout=5).status_code == 401
    wrong = requests.get(stack.admin_url + "/models", timeout=5,
                         headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403
    assert wrong.json()["error"]["type"] == "forbidden"


def served_model(stack, name: str) -> dict:
    """The `demo` fixture's set under names of the test's own, on the module's stack:
    chat model `name` on demo backend `name`-a, a consumer with one key."""
    url = stack.start_backend(f"{name}-a")
    admin = stack.admin
    model = admin.create("models", name=name, timeout_ms=5000)
    backend = admin.create("backends", name=f"{name}-a", model_id=model["id"], url=url,
                           protocol="openai", weight=100)
    consumer = admin.create("consumers", name=f"team-{name}")
    key = admin.create("keys", consumer_id=consumer["id"], name="ci")
    stack.wait_served()
    return {"model": model, "backend": backend, "consumer": consumer, "key": key}


def test_disabled_key_is_refused_after_the_next_push(stack):
    # it disables a key of its own
    key = served_model(stack, "skel-disabled")["key"]
    assert stack.chat(key["key"], "skel-disabled").status_code == 200

    stack.admin.update("keys", key["id"], enabled=False)
    stack.wait_served()

    resp = stack.chat(key["key"], "skel-disabled")
    assert resp.status_code == 403
    assert resp.json()["error"]["request_id"] == resp.headers["X-Request-Id"]


def test_new_backend_takes_traffic_without_restart(stack):
    # it drains a backend of its own
    mine = served_model(stack, "skel-drain")
    url = stack.start_backend("skel-drain-b")
    stack.admin.create("backends", name="skel-drain-b", model_id=mine["model"]["id"],
                       url=url, protocol="openai", weight=100)
    stack.admin.update("backends", mine["backend"]["id"], weight=0)  # drain skel-drain-a
    stack.wait_served()

    seen = {stack.chat(mine["key"]["key"], "skel-drain").headers["X-Demo-Backend"]
            for _ in range(10)}
    assert seen == {"skel-drain-b"}


def test_gateway_serves_with_control_plane_down_and_after_restart_from_lkg(own_stack, demo):
    stack = own_stack  # it stops the API, the controller and nginx: a stack of its own
    key = demo["key"]["key"]
    version = stack.gateway.served_version()
    stack.stop("controller")
    stack.stop("api")

    assert stack.chat(key, "chat-demo").status_code == 200

    # A cold start with nothing pushed: the last-known-good file is all it has.
    stack.gateway.stop()
    stack.gateway.start()
    assert stack.gateway.served_version() == version
    resp = stack.chat(key, "chat-demo")
    assert resp.status_code == 200, resp.text
    status = requests.get(stack.gateway.internal_url + "/internal/snapshot", timeout=5,
                          headers={"Authorization": f"Bearer {stack.gateway_token}"}).json()
    assert status["source"] == "lkg"


def test_sighup_reloads_controller_settings_and_repushes(own_stack, demo):
    stack = own_stack  # it adds a gateway and reloads the controller: a stack of its own
    second = stack.new_gateway("gw2")
    assert second.served_version() == 0
    before = _loaded_at(stack, stack.gateway)

    stack.write_config([stack.gateway, second])  # the controller learns of gw2 ...
    time.sleep(0.5)
    assert second.served_version() == 0          # ... only once told to reload
    stack.children["controller"].send_signal(signal.SIGHUP)

    stack.wait_served(second)
    assert stack.chat(demo["key"]["key"], "chat-demo", gateway=second).status_code == 200
    # and the first gateway got the same version pushed again
    deadline = time.monotonic() + 10
    while _loaded_at(stack, stack.gateway) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _loaded_at(stack, stack.gateway) > before


def test_nginx_reload_keeps_serving_the_same_snapshot(own_stack, demo):
    stack = own_stack  # it stops the controller: a stack of its own
    key = demo["key"]["key"]
    version = stack.gateway.served_version()
    stack.stop("controller")  # nothing can push: what is served must survive by itself
    statuses: list[int] = []
    done = threading.Event()

    def load():
        while not done.is_set():
            statuses.append(stack.chat(key, "chat-demo").status_code)

    worker = threading.Thread(target=load)
    worker.start()
    try:
        time.sleep(0.3)
        stack.gateway.reload()
        time.sleep(0.5)
    finally:
        done.set()
        worker.join()

    assert stack.gateway.served_version() == version
    assert statuses and set(statuses) == {200}, statuses
    assert stack.chat(key, "chat-demo").status_code == 200


def _loaded_at(stack, gateway) -> float:
    return requests.get(gateway.internal_url + "/internal/snapshot", timeout=5,
                        headers={"Authorization": f"Bearer {stack.gateway_token}"}
                        ).json()["loaded_at"]


def test_new_vendor_through_the_admin_api_needs_no_code_or_reload(stack):
    """A mapping created at run time makes a vendor's API usable from every endpoint."""
    url = stack.start_backend("vendor-b", protocol="vendor-b")
    admin = stack.admin
    workers = stack.gateway._worker_pids()     # no reload: the same workers serve it
    mapping = admin.create("mappings", name="vendor-b", path="/api/infer",
                           request={"content": "{{input}}", "lang": "cn"},
                           response={"output": "/data/answer", "error": "/msg"})
    model = admin.create("models", name="qa-cn")
    admin.create("backends", name="vendor-b-1", model_id=model["id"], url=url,
                 protocol="vendor", mapping_id=mapping["id"])
    consumer = admin.create("consumers", name="team-c")
    key = admin.create("keys", consumer_id=consumer["id"], name="ci")["key"]
    stack.wait_served()

    resp = stack.chat(key, "qa-cn", text="你好，世界")
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "B[cn]: 你好，世界"
    resp = requests.post(stack.gateway.url + "/v1/predict", timeout=10,
                         headers={"X-API-Key": key},
                         json={"api_version": "1.0", "model": "qa-cn",
                               "params": {"input": ["早上好"]}})
    assert resp.status_code == 200, resp.text
    assert resp.json()["outputs"] == ["B[cn]: 早上好"]
    assert stack.gateway._worker_pids() == workers
