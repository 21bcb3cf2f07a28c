"""The response cache: hit, miss, bypass, expiry, scope, and what is never cached."""
from __future__ import annotations

import time
import uuid

import pytest
import requests
from gateway_readings import access_lines, scrape, value

ALICE, BOB = "sk-test-cache-alice-0123456789", "sk-test-cache-bob-0123456789"


def serve_cache_models(gateway, helpers, backends):
    """Push the cache tests' models and consumers to `gateway`; return it."""
    def model(backend, i, ttl=300, shared=False):
        return (5000, [backends[backend].entry(i)]), {"cache_ttl_s": ttl, "cache_shared": shared}

    specs = {"kv1": model("predict-a", 1), "short": model("predict-a", 2, ttl=3),
             "shared": model("predict-a", 3, shared=True), "off": model("predict-a", 4, ttl=0),
             "llm": model("openai-a", 5)}
    snap = helpers.make_snapshot(
        1, {name: m for name, (m, _) in specs.items()},
        consumers={"1": {"id": 1, "name": "alice", "allowed_models": None},
                   "2": {"id": 2, "name": "bob", "allowed_models": None}},
        keys={helpers.key_hash(ALICE): {"id": 1, "consumer_id": 1, "prefix": "a",
                                        "expires_at": None},
              helpers.key_hash(BOB): {"id": 2, "consumer_id": 2, "prefix": "b",
                                      "expires_at": None}})
    for name, (_, extra) in specs.items():
        snap["models"][name].update(extra)
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    return gateway


@pytest.fixture
def cache_gw(gateway, helpers, backends):
    return serve_cache_models(gateway, helpers, backends)


def predict(gw, model, instances, key=ALICE, headers=None, raw=None):
    h = {"X-API-Key": key, "Content-Type": "application/json", **(headers or {})}
    if raw is not None:
        return requests.post(gw.url + f"/v1/models/{model}/predict", data=raw, headers=h,
                             timeout=10)
    return requests.post(gw.url + f"/v1/models/{model}/predict", json={"instances": instances},
                         headers=h, timeout=10)


def status(r):
    assert r.status_code == 200, r.text
    return r.headers.get("X-Cache-Status")


def test_miss_then_hit_without_the_backend(cache_gw):
    first = predict(cache_gw, "kv1", ["cached?", 1])
    assert status(first) == "MISS" and first.headers["X-Demo-Backend"] == "predict-a"
    second = predict(cache_gw, "kv1", ["cached?", 1])
    assert status(second) == "HIT"
    assert "X-Demo-Backend" not in second.headers          # the backend never saw it
    assert second.json() == first.json()
    assert second.headers["Content-Type"] == first.headers["Content-Type"]
    # the key is the normalised body: other whitespace and key order still hit
    raw = b'{ "instances" : ["cached?",1] }'
    assert status(predict(cache_gw, "kv1", None, raw=raw)) == "HIT"
    assert status(predict(cache_gw, "kv1", ["other"])) == "MISS"


def test_no_cache_bypasses_and_refreshes(cache_gw):
    assert status(predict(cache_gw, "kv1", ["bypass"])) == "MISS"
    r = predict(cache_gw, "kv1", ["bypass"], headers={"Cache-Control": "no-cache"})
    assert status(r) == "BYPASS" and r.headers["X-Demo-Backend"] == "predict-a"
    assert status(predict(cache_gw, "kv1", ["bypass"])) == "HIT"


def test_entries_expire_after_the_model_ttl(cache_gw):
    # TTL 3 s: the second call comes right after the first; the third after 3.5 s
    assert status(predict(cache_gw, "short", ["expiry"])) == "MISS"
    assert status(predict(cache_gw, "short", ["expiry"])) == "HIT"
    time.sleep(3.5)
    r = predict(cache_gw, "short", ["expiry"])
    assert status(r) == "MISS" and r.headers["X-Demo-Backend"] == "predict-a"


def test_consumers_do_not_share_unless_the_model_says(cache_gw):
    assert status(predict(cache_gw, "kv1", ["mine"], key=ALICE)) == "MISS"
    assert status(predict(cache_gw, "kv1", ["mine"], key=BOB)) == "MISS"
    assert status(predict(cache_gw, "kv1", ["mine"], key=BOB)) == "HIT"
    assert status(predict(cache_gw, "shared", ["ours"], key=ALICE)) == "MISS"
    assert status(predict(cache_gw, "shared", ["ours"], key=BOB)) == "HIT"


def test_errors_and_uncacheable_requests_are_not_cached(cache_gw, helpers):
    r = predict(cache_gw, "kv1", ["err"], headers={"X-Demo-Status": "429"})
    assert r.status_code == 429
    assert status(predict(cache_gw, "kv1", ["err"])) == "MISS"      # the 429 was not kept
    assert status(predict(cache_gw, "off", ["x"])) is None          # TTL 0: no cache
    assert status(predict(cache_gw, "off", ["x"])) is None
    # LLM calls: only temperature 0, never streams
    hot = helpers.chat(cache_gw, model="llm", key=ALICE, temperature=0.7)
    assert status(hot) is None
    assert status(helpers.chat(cache_gw, model="llm", key=ALICE, temperature=0)) == "MISS"
    hit = helpers.chat(cache_gw, model="llm", key=ALICE, temperature=0)
    assert status(hit) == "HIT"
    assert hit.json()["choices"][0]["message"]["content"] == "echo: hello there"
    streamed = helpers.chat(cache_gw, model="llm", key=ALICE, temperature=0, stream=True)
    assert status(streamed) is None


def test_converted_answers_are_cached_and_keep_the_callers_request_id(cache_gw):
    def envelope():
        rid = str(uuid.uuid4())
        r = requests.post(cache_gw.url + "/v1/predict", headers={"X-API-Key": ALICE},
                          json={"api_version": "1.0", "model": "kv1", "request_id": rid,
                                "params": {"input": ["envelope"], "threshold": 0.5}},
                          timeout=10)
        assert r.json()["request_id"] == rid
        return r
    first, second = envelope(), envelope()
    assert status(first) == "MISS" and status(second) == "HIT"
    assert second.json()["outputs"] == first.json()["outputs"]


def test_cache_outcomes_reach_metrics_and_the_access_log(gateway_factory, helpers, backends):
    # it reads the metrics and the access log whole: a gateway of its own
    cache_gw = serve_cache_models(gateway_factory(), helpers, backends)
    tag = uuid.uuid4().hex
    outcomes = [status(predict(cache_gw, "kv1", [tag])),
                status(predict(cache_gw, "kv1", [tag])),
                status(predict(cache_gw, "kv1", [tag], headers={"Cache-Control": "no-cache"}))]
    assert outcomes == ["MISS", "HIT", "BYPASS"]

    samples = scrape(cache_gw)
    for outcome in outcomes:
        assert value(samples, "sluice_cache_requests_total", model="kv1",
                     status=outcome) == 1
    logged = [line["cache"] for line in access_lines(cache_gw, 3) if line["model"] == "kv1"]
    assert sorted(logged) == sorted(outcomes)  # each worker buffers its own lines
