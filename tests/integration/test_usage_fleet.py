"""Usage through the whole stack: counted by the gateway, collected by the controller
into Postgres, shown by the admin API, and pushed back so a restarted gateway keeps
enforcing the quota."""
from __future__ import annotations

import signal
import time

import requests


def _wait(what, fn, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _quota(stack, consumer_id: int) -> dict:
    r = requests.get(f"{stack.admin_url}/consumers/{consumer_id}/usage",
                     headers={"Authorization": f"Bearer {stack.admin_token}"}, timeout=5)
    assert r.status_code == 200, r.text
    body = r.json()
    [daily] = [q for q in body["quotas"] if q["quota"] == "daily_requests"]
    return {"today": body["today"]["requests"], "used": daily["used"],
            "remaining": daily["remaining"], "limit": daily["limit"],
            "tokens": body["today"]["total_tokens"]}


def test_usage_survives_gateway_and_controller_restarts(own_stack, demo):
    stack = own_stack  # it restarts the gateway and the controller: a stack of its own
    admin = stack.admin
    cid = demo["consumer"]["id"]
    plan = admin.create("plans", name="five-a-day", daily_requests=5)
    admin.update("consumers", cid, plan_id=plan["id"])
    stack.wait_served()
    key = demo["key"]["key"]

    tokens = 0
    for _ in range(3):
        r = stack.chat(key, "chat-demo")
        assert r.status_code == 200, r.text
        tokens += r.json()["usage"]["total_tokens"]
    got = _wait("3 requests in the admin API", lambda: (q := _quota(stack, cid))["used"] >= 3
                and q)
    assert got == {"today": 3, "used": 3, "remaining": 2, "limit": 5, "tokens": tokens}

    # a new controller reads the same counters again: nothing is counted twice
    stack.stop("controller")
    stack.start_controller()
    assert stack.chat(key, "chat-demo").status_code == 200
    got = _wait("the 4th request", lambda: (q := _quota(stack, cid))["used"] >= 4 and q)
    assert (got["used"], got["remaining"]) == (4, 1)

    # a restarted gateway has lost its counters; the controller gives them back
    gw = stack.gateway
    old_boot = gw.usage()["boot"]
    gw.stop()
    gw.start()
    assert gw.usage()["boot"] != old_boot
    _wait("the fleet's usage pushed to the restarted gateway",
          lambda: gw.usage()["seed_version"] > 0)
    assert stack.chat(key, "chat-demo").status_code == 200          # the 5th
    r = stack.chat(key, "chat-demo")
    assert r.status_code == 429, r.text
    err = r.json()["error"]
    assert err["type"] == "rate_limited" and "daily request quota" in err["message"]
    assert int(r.headers["Retry-After"]) > 0
    got = _wait("the 5th request", lambda: (q := _quota(stack, cid))["used"] >= 5 and q)
    assert (got["used"], got["remaining"]) == (5, 0)


def test_two_gateways_share_the_daily_quota(own_stack, demo):
    stack = own_stack  # it adds a gateway: a stack of its own
    second = stack.new_gateway("gw2")
    stack.write_config([stack.gateway, second])
    stack.children["controller"].send_signal(signal.SIGHUP)
    stack.wait_served(second)
    cid = demo["consumer"]["id"]
    plan = stack.admin.create("plans", name="four-a-day", daily_requests=4)
    stack.admin.update("consumers", cid, plan_id=plan["id"])
    stack.wait_served()
    stack.wait_served(second)
    key = demo["key"]["key"]
    for gw in (stack.gateway, stack.gateway, second, second):
        assert stack.chat(key, "chat-demo", gateway=gw).status_code == 200
    _wait("4 requests in the admin API", lambda: _quota(stack, cid)["used"] >= 4)
    assert _quota(stack, cid)["used"] == 4
    day = time.strftime("%Y%m%d", time.gmtime())
    counter = f"qd:{cid}:*:{day}"
    for gw in (stack.gateway, second):   # each gets the other's 2 requests
        _wait("the other gateway's usage", lambda gw=gw: gw.usage()["offsets"].get(counter) == 2)
    for gw in (stack.gateway, second):
        r = stack.chat(key, "chat-demo", gateway=gw)
        assert r.status_code == 429, r.text
        assert "daily request quota" in r.json()["error"]["message"]
