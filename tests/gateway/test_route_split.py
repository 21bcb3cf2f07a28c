"""Routes: percentage splits (canary, A/B) and conditions on consumer attributes,
sticky per caller, measured through real nginx on the real demo backends.

Shares are measured over many distinct callers and must land within 4 binomial
standard deviations of the split (the sticky draw is a hash, so with these fixed
keys the outcome is the same on every run; 4 sigma is the statistical claim).
"""
from __future__ import annotations

import math
import time

import jwt as pyjwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from gateway_readings import access_lines
from waiting import eventually

from prometheus_client.parser import text_string_to_metric_families

STABLE, CANARY = "chat-stable", "chat-canary"


def route_counts(gw) -> dict:
    """sluice_route_requests_total as {(route, version): count}."""
    r = requests.get(gw.internal_url + "/metrics", timeout=5,
                     headers={"Authorization": f"Bearer {gw.cfg.token}"})
    assert r.status_code == 200, r.text
    return {(s.labels["route"], s.labels["version"]): s.value
            for fam in text_string_to_metric_families(r.text)
            for s in fam.samples if s.name == "sluice_route_requests_total"}




def route_snapshot(helpers, backends, routes: dict, n_consumers: int = 0,
                   attributes=None, version: int = 1) -> dict:
    """chat-stable on openai-a, chat-canary on openai-b, predict-demo on predict-a,
    plus `n_consumers` numbered consumers (key sk-route-<i>) besides alice and bob."""
    snap = helpers.make_snapshot(version, {
        STABLE: (5000, [backends["openai-a"].entry(1)]),
        CANARY: (5000, [backends["openai-b"].entry(2)]),
        "predict-demo": (5000, [backends["predict-a"].entry(3)]),
    })
    for i in range(100, 100 + n_consumers):
        attrs = attributes(i) if attributes else {}
        snap["consumers"][str(i)] = {"id": i, "name": f"user-{i}", "allowed_models": None,
                                     "attributes": attrs}
        snap["keys"][helpers.key_hash(consumer_key(i))] = {
            "id": i, "consumer_id": i, "prefix": "sk-route-", "expires_at": None}
    snap["routes"] = routes
    return snap


def consumer_key(i: int) -> str:
    return f"sk-route-{i:06d}"


def split(*pairs, sticky: bool = True) -> dict:
    return {"sticky": sticky,
            "versions": [{"model": m, "percent": p} for m, p in pairs]}


def within_4_sigma(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= 4 * math.sqrt(n * p * (1 - p))


def versions_seen(gw, helpers, keys, model="chat", session=None) -> list[str]:
    """For each key, the backend that answered (X-Demo-Backend), checking that the
    answer names the same version in X-Sluice-Route-Version and in its "model"."""
    s = session or requests.Session()
    seen = []
    for key in keys:
        r = s.post(gw.url + "/v1/chat/completions", timeout=10,
                   headers={"Authorization": f"Bearer {key}"},
                   json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        version = r.headers["X-Sluice-Route-Version"]
        assert r.json()["model"] == version
        assert r.headers["X-Demo-Backend"] == {STABLE: "openai-a", CANARY: "openai-b"}[version]
        seen.append(version)
    return seen


@pytest.fixture
def push(gateway):
    """Serve a snapshot on the module's gateway (the test's turn)."""
    def serve(snap: dict):
        r = gateway.push(snap)
        assert r.status_code == 200, r.text
        return gateway
    return serve


@pytest.mark.parametrize("canary_percent", [10, 5])
def test_split_measured_over_2000_consumers(own_gateway, helpers, backends, canary_percent):
    # a gateway of its own: the route's counters are read from zero
    n = 2000
    gw = own_gateway
    assert gw.push(route_snapshot(helpers, backends, {
        "chat": split((STABLE, 100 - canary_percent), (CANARY, canary_percent))},
        n_consumers=n)).status_code == 200
    seen = versions_seen(gw, helpers, [consumer_key(i) for i in range(100, 100 + n)])
    canary = seen.count(CANARY)
    assert canary + seen.count(STABLE) == n
    assert within_4_sigma(canary, n, canary_percent / 100), canary
    # the decision is counted per version
    assert route_counts(gw) == {("chat", CANARY): canary, ("chat", STABLE): n - canary}


def test_sticky_route_gives_each_consumer_one_version(push, helpers, backends):
    gw = push(route_snapshot(helpers, backends, {
        "chat": split((STABLE, 50), (CANARY, 50))}, n_consumers=20))
    keys = [consumer_key(i) for i in range(100, 120)]
    first = dict(zip(keys, versions_seen(gw, helpers, keys)))
    assert set(first.values()) == {STABLE, CANARY}   # both halves are in use
    s = requests.Session()
    for key in keys[:4]:
        assert set(versions_seen(gw, helpers, [key] * 50, session=s)) == {first[key]}


def test_non_sticky_route_draws_per_request(push, helpers, backends):
    gw = push(route_snapshot(helpers, backends, {
        "chat": split((STABLE, 50), (CANARY, 50), sticky=False)}))
    seen = versions_seen(gw, helpers, [helpers.KEY] * 400)
    assert within_4_sigma(seen.count(CANARY), 400, 0.5), seen.count(CANARY)


def test_route_named_like_a_model_splits_that_model(push, helpers, backends):
    """The usual canary: callers keep asking for chat-stable; 100 % go to the canary."""
    gw = push(route_snapshot(helpers, backends, {STABLE: split((STABLE, 0), (CANARY, 100))}))
    assert versions_seen(gw, helpers, [helpers.KEY] * 3, model=STABLE) == [CANARY] * 3
    # the other model is still reachable by its own name, unrouted
    r = helpers.chat(gw, model=CANARY)
    assert r.status_code == 200 and "X-Sluice-Route-Version" not in r.headers


def test_condition_sends_vips_to_their_version(push, helpers, backends):
    vip = {"model": CANARY, "percent": 100,
           "conditions": [{"attr": "user_type", "op": "eq", "value": "vip"}]}
    gw = push(route_snapshot(helpers, backends, {
        "chat": {"sticky": True, "versions": [vip, {"model": STABLE, "percent": 100}]}},
        n_consumers=40, attributes=lambda i: {"user_type": "vip" if i % 2 else "basic"}))
    vips = [consumer_key(i) for i in range(100, 140) if i % 2]
    others = [consumer_key(i) for i in range(100, 140) if not i % 2]
    assert set(versions_seen(gw, helpers, vips)) == {CANARY}
    assert set(versions_seen(gw, helpers, others)) == {STABLE}
    # alice has no user_type at all: the general split
    assert versions_seen(gw, helpers, [helpers.KEY]) == [STABLE]


def test_condition_with_percent_and_in_operator(push, helpers, backends):
    """Half of the gold and platinum callers try the canary; everyone else stays."""
    half = {"model": CANARY, "percent": 50,
            "conditions": [{"attr": "tier", "op": "in", "value": ["gold", "platinum"]},
                           {"attr": "region", "op": "ne", "value": "cn"}]}
    tiers = ["gold", "platinum", "basic"]
    n = 900
    gw = push(route_snapshot(helpers, backends, {
        "chat": {"versions": [half, {"model": STABLE, "percent": 100}]}},
        n_consumers=n, attributes=lambda i: {"tier": tiers[i % 3], "region": "eu"}))
    keys = {t: [consumer_key(i) for i in range(100, 100 + n) if tiers[i % 3] == t]
            for t in tiers}
    gold = versions_seen(gw, helpers, keys["gold"] + keys["platinum"])
    assert within_4_sigma(gold.count(CANARY), len(gold), 0.5), gold.count(CANARY)
    assert set(versions_seen(gw, helpers, keys["basic"])) == {STABLE}


def test_jwt_subjects_stick_one_by_one(push, helpers, backends):
    """One JWT consumer (an app) with many end users (sub): each user sticks to its
    version, and the users split between the versions; claims feed conditions."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    vip = {"model": CANARY, "percent": 100,
           "conditions": [{"attr": "user_type", "op": "eq", "value": "vip"}]}
    snap = route_snapshot(helpers, backends, {
        "chat": {"versions": [vip, {"model": STABLE, "percent": 50},
                              {"model": CANARY, "percent": 50}]}})
    snap["jwt"] = {"1": {"id": 1, "name": "app", "issuer": None, "audience": None,
                         "consumer_claim": "client", "expires_at": None,
                         "keys": [{"kid": None, "alg": "ES256", "pem": pem.decode()}]}}
    gw = push(snap)

    def token(sub, **claims):
        body = {"client": "alice", "sub": sub, "exp": int(time.time()) + 300, **claims}
        return pyjwt.encode(body, key, algorithm="ES256")

    n = 400
    seen = versions_seen(gw, helpers, [token(f"user-{i}") for i in range(n)])
    assert within_4_sigma(seen.count(CANARY), n, 0.5), seen.count(CANARY)
    for i in range(3):   # a fresh token of the same user: the same version
        again = versions_seen(gw, helpers, [token(f"user-{i}", n=j) for j in range(10)])
        assert set(again) == {seen[i]}
    stable_users = [i for i in range(n) if seen[i] == STABLE][:5]
    assert set(versions_seen(gw, helpers, [token(f"user-{i}", user_type="vip")
                                           for i in stable_users])) == {CANARY}


def test_path_model_endpoints_ask_the_chosen_model(push, helpers, backends):
    gw = push(route_snapshot(helpers, backends, {"predict": split(("predict-demo", 100))}))
    r = requests.post(gw.url + "/v1/models/predict/predict", timeout=10,
                      headers={"Authorization": f"Bearer {helpers.KEY}"},
                      json={"instances": [[1, 2]]})
    assert r.status_code == 200, r.text
    assert r.headers["X-Sluice-Route-Version"] == "predict-demo"
    assert r.json()["model"] == "predict-demo"


def test_routes_are_models_to_the_caller_and_logged(push, helpers, backends):
    gw = push(route_snapshot(helpers, backends, {"chat": split((CANARY, 100))}))
    h = {"Authorization": f"Bearer {helpers.KEY}"}
    listed = requests.get(gw.url + "/v1/models", headers=h, timeout=10).json()
    assert "chat" in [m["id"] for m in listed["data"]]
    assert requests.get(gw.url + "/v1/models/chat", headers=h, timeout=10).status_code == 200
    # allowed_models names public names: bob may use only chat-demo, not the route
    r = helpers.chat(gw, model="chat", key=helpers.KEY_LIMITED,
                     headers={"X-Request-Id": "route-refused"})
    helpers.assert_error(r, 403, "forbidden")
    assert helpers.chat(gw, model="chat",
                        headers={"X-Request-Id": "route-served"}).status_code == 200

    # workers flush their buffered lines independently (an earlier test's too, on the
    # module's gateway): wait for both of ours, then find them by status
    def logged():
        ours = {line["status"]: line for line in access_lines(gw, 4, timeout=0.5)
                if line["request_id"] in ("route-refused", "route-served")}
        return ours if len(ours) == 2 else None
    lines = eventually(logged, 10)
    assert (lines["200"]["route"], lines["200"]["model"]) == ("chat", CANARY)
    # refused before the choice: the model asked for, no route
    assert (lines["403"]["route"], lines["403"]["model"]) == ("", "chat")


def test_a_route_to_an_unknown_model_is_refused(push, helpers, backends):
    gw = push(route_snapshot(helpers, backends, {"chat": split((STABLE, 100))}))
    bad = route_snapshot(helpers, backends, {"chat": split(("nope", 100))}, version=2)
    r = gw.push(bad)
    assert r.status_code == 400
    assert "routes.chat.versions[1].model" in r.text
    cond = route_snapshot(helpers, backends, {"chat": {"versions": [
        {"model": STABLE, "percent": 100},
        {"model": CANARY, "percent": 100, "conditions": [{"attr": "x", "op": "gt",
                                                          "value": 1}]}]}}, version=2)
    r = gw.push(cond)
    assert r.status_code == 400 and "conditions[1].op" in r.text
    assert gw.served_version() == 1
    assert versions_seen(gw, helpers, [helpers.KEY]) == [STABLE]


@pytest.mark.parametrize("raw", [
    '{"model" :  "team\\/chat", "messages": [{"role": "user", "content": "hi"}]}',
    '{"messages": [{"role": "user", "content": "hi"}], "model": "team/chat"}',
    '{"model": "team\\u002fchat", "messages": [{"role": "user", "content": "hi"}]}',
])
def test_backend_is_asked_for_the_chosen_model_however_the_name_is_spelt(
        push, helpers, backends, raw):
    gw = push(route_snapshot(helpers, backends, {"team/chat": split((CANARY, 100))}))
    r = requests.post(gw.url + "/v1/chat/completions", data=raw, timeout=10,
                      headers={"Authorization": f"Bearer {helpers.KEY}",
                               "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert r.headers["X-Demo-Backend"] == "openai-b"
    assert r.json()["model"] == CANARY
