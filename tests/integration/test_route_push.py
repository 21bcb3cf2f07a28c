"""A route created through the admin API takes effect at the gateway after one push:
callers naming chat-demo meet the canary, vips always."""
from __future__ import annotations


def test_canary_route_through_the_admin_api(stack, demo):
    admin = stack.admin
    canary_url = stack.start_backend("chat-canary-b")
    canary = admin.create("models", name="chat-canary", timeout_ms=5000)
    admin.create("backends", name="chat-canary-b", model_id=canary["id"], url=canary_url,
                 protocol="openai", weight=100)
    vip = admin.create("consumers", name="vip", attributes={"user_type": "vip"})
    vip_key = admin.create("keys", consumer_id=vip["id"], name="vip")["key"]
    route = admin.create("routes", name="chat-demo", versions=[
        {"model": "chat-canary", "conditions": {"user_type": "vip"}},
        {"model": "chat-demo", "percent": 100}])
    stack.wait_served()

    r = stack.chat(vip_key, "chat-demo")
    assert r.status_code == 200, r.text
    assert r.headers["X-Demo-Backend"] == "chat-canary-b"
    assert r.headers["X-Sluice-Route-Version"] == "chat-canary"
    assert r.json()["model"] == "chat-canary"
    r = stack.chat(demo["key"]["key"], "chat-demo")
    assert r.headers["X-Demo-Backend"] == "chat-a"

    # everyone to the canary, then the route goes and chat-demo is itself again
    admin.update("routes", route["id"], versions=[{"model": "chat-canary", "percent": 100}])
    stack.wait_served()
    assert stack.chat(demo["key"]["key"], "chat-demo").headers["X-Demo-Backend"] \
        == "chat-canary-b"
    admin.delete("routes", route["id"])
    stack.wait_served()
    r = stack.chat(vip_key, "chat-demo")
    assert r.headers["X-Demo-Backend"] == "chat-a"
    assert "X-Sluice-Route-Version" not in r.headers
