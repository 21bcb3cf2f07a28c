"""Cluster mode: two gateways sharing one (private, real) Redis count a plan's rate
limit, request quotas and token quota together; without Redis each counts its own.
Redis outage: fail open (each gateway falls back to its own counters) or fail closed
(503 in the error template), then shared limits again once Redis is back."""
from __future__ import annotations

import math
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from control_plane.runtime.redis_server import RedisServer

PLAN_KEY = "sk-test-cluster-0123456789abcdef"   # consumer 3, on plan "p"


def snapshot(helpers, backends, plan: dict) -> dict:
    snap = helpers.make_snapshot(1, {"chat-demo": (5000, [backends["openai-a"].entry(1)])})
    return helpers.add_planned(snap, PLAN_KEY, plan, name="clustered")


def pair(gateway_factory, helpers, backends, plan, redis=None, failure="open"):
    """Two gateways (own ports, prefixes under one fixture folder), same snapshot."""
    gws = []
    for _ in range(2):
        gw = gateway_factory(workers=2, redis_url=redis.url if redis else None,
                             redis_failure=failure)
        r = gw.push(snapshot(helpers, backends, plan))
        assert r.status_code == 200, r.text
        gws.append(gw)
    assert gws[0].prefix != gws[1].prefix and gws[0].url != gws[1].url
    return gws


@pytest.fixture(scope="module")
def module_redis(tmp_path_factory):
    """A private Redis for the module's pair of gateways."""
    with RedisServer.start(tmp_path_factory.mktemp("redis")) as redis:
        yield redis


@pytest.fixture(scope="module")
def redis_gateways(shared_gateways, module_redis):
    """Two gateways (two workers each) counting on `module_redis`, failing open."""
    return [shared_gateways(workers=2, redis_url=module_redis.url, redis_failure="open")
            for _ in range(2)]


@pytest.fixture
def shared(redis_gateways, module_redis, take_turn, helpers, backends):
    """`shared(plan)` (or `shared(snap=…)`): the test's turn on the module's two
    gateways, serving `snapshot(plan)`, with `module_redis` emptied first (FLUSHALL:
    every shared counter starts at zero, as on a Redis of the test's own). For tests
    that neither stop Redis nor read the gateways' own counters."""
    module_redis.command("FLUSHALL")
    gws = [take_turn(gw) for gw in redis_gateways]

    def serve(plan: dict | None = None, snap: dict | None = None):
        for gw in gws:
            r = gw.push(snap or snapshot(helpers, backends, plan))
            assert r.status_code == 200, r.text
        assert gws[0].prefix != gws[1].prefix and gws[0].url != gws[1].url
        return gws
    return serve


def call(gw, session=None, key=PLAN_KEY, body=None):
    return (session or requests).post(
        gw.url + "/v1/chat/completions", timeout=10,
        json=body or {"model": "chat-demo", "messages": [{"role": "user", "content": "x"}]},
        headers={"Authorization": f"Bearer {key}"})


def hammer(gws, threads: int, seconds: float):
    """Clients spread over the gateways for `seconds`: (admitted, refused, elapsed)."""
    counts = {200: 0, 429: 0}
    other = []
    lock = threading.Lock()
    start = time.monotonic()

    def client(i):
        s = requests.Session()
        while time.monotonic() - start < seconds:
            r = call(gws[i % len(gws)], s)
            with lock:
                if r.status_code in counts:
                    counts[r.status_code] += 1
                else:
                    other.append(r.status_code)

    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(client, i) for i in range(threads)]:
            f.result()
    assert not other, other
    return counts[200], counts[429], time.monotonic() - start


def metric(gw, name: str, **labels) -> float:
    text = requests.get(gw.internal_url + "/metrics", timeout=5,
                        headers={"Authorization": f"Bearer {gw.cfg.token}"}).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}{{{re.escape(want)}}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def wait_until(check, what: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def quota_keys(redis, kind: str) -> list[str]:
    return redis.command("KEYS", f"sluice:{kind}:*")


def test_one_bucket_across_two_gateways(shared, helpers, module_redis):
    """At 20/s with burst 10, clients on both gateways for ~3 s: one bucket's theory,
    10 + 20 * elapsed, with the tolerance of test_limits.py's single-gateway test
    (+2 above; 25 % below for a busy machine whose clients stall)."""
    plan = {"rate_per_second": 20, "burst": 10}
    gws = shared(plan)
    admitted, refused, elapsed = hammer(gws, threads=8, seconds=3.0)
    theory = 10 + 20 * elapsed
    print(f"redis: admitted {admitted}, refused {refused}, theory {theory:.1f}")
    assert refused > 0, "the clients did not exceed the rate; the test proves nothing"
    assert 0.75 * theory <= admitted <= theory + 2, (admitted, theory, elapsed)
    assert module_redis.command("KEYS", "sluice:r:*")


def test_without_redis_each_gateway_has_its_own_bucket(gateway_factory, helpers,
                                                       backends):
    """The negative control of the test above: same load, no Redis, about twice the
    theory of one bucket gets in, outside that test's tolerance."""
    gws = pair(gateway_factory, helpers, backends, {"rate_per_second": 20, "burst": 10})
    admitted, refused, elapsed = hammer(gws, threads=8, seconds=3.0)
    theory = 10 + 20 * elapsed
    print(f"local: admitted {admitted}, refused {refused}, theory {theory:.1f}")
    assert refused > 0
    assert admitted > theory + 2, (admitted, theory, elapsed)


def test_burst_and_headers_shared(shared, helpers, module_redis):
    # 0.01/s: no token comes back during the test, so the count is exact
    a, b = shared({"rate_per_second": 0.01, "burst": 4})
    remaining = []
    for gw in (a, b, a, b):
        r = call(gw)
        assert r.status_code == 200, r.text
        assert r.headers["X-RateLimit-Limit"] == "4"
        remaining.append(int(r.headers["X-RateLimit-Remaining"]))
    assert remaining == [3, 2, 1, 0]
    for gw in (a, b):
        r = call(gw)
        err = helpers.assert_error(r, 429, "rate_limited")
        assert 90 <= err["retry_after"] <= 100 and r.headers["Retry-After"] == \
            str(err["retry_after"])


def test_daily_quota_shared(shared, helpers, module_redis):
    a, b = shared({"rate_per_second": 1000, "daily_requests": 10})
    assert [call(gw).status_code for gw in (a, b) * 5] == [200] * 10
    for gw in (a, b):
        r = call(gw)
        err = helpers.assert_error(r, 429, "rate_limited")
        assert "daily request quota" in err["message"]
        assert 1 <= err["retry_after"] <= 86400
        assert r.headers["Retry-After"] == str(err["retry_after"])
        assert r.headers["X-RateLimit-Limit"] == "1000"
        assert "X-RateLimit-Remaining" in r.headers and "X-RateLimit-Reset" in r.headers
    [key] = quota_keys(module_redis, "qd")
    assert module_redis.command("GET", key) == "10"
    # the counter ends with the UTC day (plus a minute)
    assert 0 < module_redis.command("TTL", key) <= 86400 + 60


def test_password_and_database(gateway_factory, helpers, backends, tmp_path):
    """redis://:password@host:port/db: AUTH and SELECT on each new connection."""
    with RedisServer.start(tmp_path / "redis", password="pa ss/word") as redis:
        gws = []
        for _ in range(2):
            gw = gateway_factory(redis_url=redis.url_for(3))
            assert gw.push(snapshot(helpers, backends, {"daily_requests": 2})).status_code == 200
            gws.append(gw)
        assert [call(gw).status_code for gw in gws + gws] == [200, 200, 429, 429]
        [key] = redis.command("KEYS", "sluice:qd:*", db=3)
        assert redis.command("GET", key, db=3) == "2"
        assert redis.command("DBSIZE") == 0
        assert all(metric(gw, "sluice_redis_errors_total", op="rate") == 0 for gw in gws)


def test_token_quota_shared(shared, helpers, module_redis):
    """Reserve ceil(bytes / 4) + max_tokens, settle at the backend's usage (5 tokens
    for "hello there", see test_tokens.py), the counter in Redis for both gateways."""
    body = {"model": "chat-demo", "max_tokens": 20,
            "messages": [{"role": "user", "content": "hello there"}]}
    size = len(requests.Request("POST", "http://x", json=body).prepare().body)
    reserve = math.ceil(size / 4) + 20
    used = 5
    a, b = shared({"rate_per_second": 1000, "monthly_tokens": reserve + used})

    def settled_at(n):
        keys = quota_keys(module_redis, "tm")
        return keys and module_redis.command("GET", keys[0]) == str(n)

    assert call(a, body=body).status_code == 200
    wait_until(lambda: settled_at(used), "settlement of the first request")
    # fits only because gateway a settled at the real usage, in the shared counter
    assert call(b, body=body).status_code == 200
    wait_until(lambda: settled_at(2 * used), "settlement of the second request")
    for gw in (a, b):
        err = helpers.assert_error(call(gw, body=body), 429, "rate_limited")
        assert "monthly token quota" in err["message"]
    assert settled_at(2 * used)    # refusals give their reservation back at once


def test_fail_open_falls_back_then_shares_again(gateway_factory, helpers, backends,
                                                redis_server):
    a, b = pair(gateway_factory, helpers, backends,
                {"rate_per_second": 1000, "daily_requests": 3}, redis_server)
    assert [call(gw).status_code for gw in (a, b)] == [200, 200]
    redis_server.stop()
    # each gateway now counts on its own: 3 more each, then its own 429
    for gw in (a, b):
        assert [call(gw).status_code for _ in range(4)] == [200, 200, 200, 429]
        assert metric(gw, "sluice_redis_errors_total", op="rate") >= 1
        assert metric(gw, "sluice_redis_bypassed_total", outcome="local") >= 4
        # logged once per 10 s per worker, not per request
        lines = [ln for ln in gw.error_log.read_text().splitlines()
                 if "limits fall back to this gateway's own counters" in ln]
        assert 1 <= len(lines) <= gw.cfg.workers, lines

    redis_server.restart()            # empty: today's count starts again
    counted = {"n": 0}

    def redis_counts(gw):
        """One request through `gw`: did the shared counter move?"""
        call(gw)
        keys = quota_keys(redis_server, "qd")
        n = int(redis_server.command("GET", keys[0])) if keys else 0
        moved, counted["n"] = n > counted["n"], n
        return moved

    for gw in (a, b):   # each gateway goes back to Redis within a second or so
        wait_until(lambda: redis_counts(gw), "the gateway using Redis again")
    assert counted["n"] == 2
    assert [call(gw).status_code for gw in (a, b, a)] == [200, 429, 429]


def test_fail_closed_answers_503(gateway_factory, helpers, backends, redis_server):
    a, _ = pair(gateway_factory, helpers, backends,
                {"rate_per_second": 1000, "daily_requests": 100}, redis_server,
                failure="closed")
    assert call(a).status_code == 200
    redis_server.stop()
    r = call(a)
    err = helpers.assert_error(r, 503, "backend_unavailable")
    assert "rate limit cannot be checked" in err["message"] and "Redis" in err["message"]
    assert err["retry_after"] == 1 and r.headers["Retry-After"] == "1"
    # a consumer without a plan needs no limiter
    assert helpers.chat(a).status_code == 200
    assert metric(a, "sluice_redis_bypassed_total", outcome="refused") >= 1
    redis_server.restart()
    wait_until(lambda: call(a).status_code == 200, "service once Redis is back")


def redis_calls(redis) -> dict[str, int]:
    """Calls per command so far (INFO commandstats: commands that clients sent and
    those that scripts ran), INFO itself left out."""
    text = redis.command("INFO", "commandstats")
    return {name: int(calls) for name, calls
            in re.findall(r"^cmdstat_([a-z|]+):calls=(\d+)", text, re.M) if name != "info"}


def streamed(content: str = "hello there") -> dict:
    """A streamed chat without include_usage: the demo backend reports no usage, so
    the reservation stays the charge and nothing is settled (the only Redis calls
    are access's)."""
    return {"model": "chat-demo", "max_tokens": 20, "stream": True,
            "messages": [{"role": "user", "content": content}]}


def reservation(body: dict) -> int:
    size = len(requests.Request("POST", "http://x", json=body).prepare().body)
    return math.ceil(size / 4) + body["max_tokens"]


def counter(redis, kind: str) -> int:
    [key] = quota_keys(redis, kind)
    return int(redis.command("GET", key))


def test_one_round_trip_per_request(shared, helpers, module_redis):
    """Every limit of a full plan (bucket, daily and monthly requests, token quota;
    concurrency stays local) in one EVALSHA per request, counted by Redis itself."""
    body = streamed()
    reserve = reservation(body)
    a, b = shared({"rate_per_second": 0.01, "burst": 100, "max_concurrent": 4,
                 "daily_requests": 100, "monthly_requests": 100,
                 "monthly_tokens": 100 * reserve})
    assert call(a, body=body).status_code == 200    # loads the script (NOSCRIPT, EVAL)
    before = redis_calls(module_redis)
    remaining = []
    for gw in (a, b) * 3:
        r = call(gw, body=body)
        assert r.status_code == 200, r.text
        assert "data: [DONE]" in r.text
        remaining.append(int(r.headers["X-RateLimit-Remaining"]))
    calls = redis_calls(module_redis)
    made = {name: n - before.get(name, 0) for name, n in calls.items()
            if n != before.get(name, 0)}
    # commandstats also counts what the scripts call: TIME, GET, SET for the bucket,
    # INCRBY per counter; the only command sent is EVALSHA, one per request
    assert made.pop("evalsha") == 6 and made.get("incrby") == 3 * 6, made
    assert set(made) <= {"time", "get", "set", "incrby", "expireat"}, made
    # one bucket for both gateways (0.01/s: no token comes back meanwhile)
    assert remaining == [98, 97, 96, 95, 94, 93]
    assert counter(module_redis, "qd") == counter(module_redis, "qm") == 7
    assert counter(module_redis, "tm") == 7 * reserve


def test_refusal_gives_counts_back_in_the_same_round_trip(gateway_factory, helpers,
                                                          backends, redis_server):
    """The token quota (the last limit) refuses: the daily and monthly counts the
    script made are undone inside it, so the refusal is one EVALSHA too and the
    counters never show the refused request."""
    body = streamed()
    reserve = reservation(body)
    a, b = pair(gateway_factory, helpers, backends,
                {"rate_per_second": 1000, "daily_requests": 10, "monthly_requests": 10,
                 "monthly_tokens": 2 * reserve}, redis_server)
    assert [call(gw, body=body).status_code for gw in (a, b)] == [200, 200]
    before = redis_calls(redis_server)
    r = call(a, body=body)
    err = helpers.assert_error(r, 429, "rate_limited")
    assert "monthly token quota" in err["message"]
    assert r.headers["X-RateLimit-Limit"] == "1000"
    assert redis_calls(redis_server)["evalsha"] - before["evalsha"] == 1
    assert counter(redis_server, "qd") == counter(redis_server, "qm") == 2
    assert counter(redis_server, "tm") == 2 * reserve
    assert metric(a, "sluice_rate_limited_total", model="chat-demo", plan="p",
                  limit="tokens") == 1


def test_a_jobs_run_refused_for_saturation_gives_its_quota_back(shared, helpers,
                                                                  backends, module_redis):
    """A worker's run of a job (worker token, on the consumer's behalf) that a full pool
    refuses is retried later: the daily count it took in Redis goes back, so a quota
    of 2 still gives 2 answers (docs/contracts.md, "Buffering at peak")."""
    snap = snapshot(helpers, backends, {"rate_per_second": 1000, "daily_requests": 2})
    snap["models"]["chat-demo"]["backends"][0]["max_in_flight"] = 1
    gw, _ = shared(snap=snap)
    hold = f"cluster-{time.monotonic_ns()}"
    holder = threading.Thread(target=lambda: helpers.chat(
        gw, headers={"X-Demo-Hold": hold}), daemon=True)   # consumer 1: no plan
    holder.start()
    try:
        wait_until(lambda: gw.stats()["backends"]["1"]["in_flight"] == 1, "the hold")
        for _ in range(3):
            r = requests.post(gw.url + "/v1/chat/completions", timeout=10,
                              json={"model": "chat-demo",
                                    "messages": [{"role": "user", "content": "x"}]},
                              headers={"X-Sluice-Worker-Token": gw.cfg.token,
                                       "X-Sluice-On-Behalf-Of": "3",
                                       "X-Sluice-Job-Id": "job_cluster"})
            helpers.assert_error(r, 503, "backend_unavailable")
        assert [module_redis.command("GET", k) for k in quota_keys(module_redis, "qd")] \
            in ([], ["0"])
    finally:
        requests.post(f"http://127.0.0.1:{backends['openai-a'].port}/demo/release/{hold}",
                      timeout=5)
        holder.join(10)
    assert [call(gw).status_code for _ in range(3)] == [200, 200, 429]


def test_daily_media_caps_shared(shared, helpers, backends, module_redis):
    """A plan's max_images_per_day and max_speech_chars_per_day count in Redis: what
    one gateway reserved, the other sees; a failed answer gives its share back there."""
    snap = snapshot(helpers, backends, {"rate_per_second": 1000, "max_images_per_day": 5,
                                        "max_speech_chars_per_day": 12})
    snap["models"]["image-demo"] = {"id": 2, "name": "image-demo", "timeout_ms": 5000,
                                    "media_tasks": ["image", "speech"],
                                    "backends": [backends["openai-a"].entry(2)]}
    a, b = shared(snap=snap)

    def draw(gw, n, **headers):
        return requests.post(gw.url + "/v1/images/generations", timeout=10,
                             json={"model": "image-demo", "prompt": "p", "n": n},
                             headers={"Authorization": f"Bearer {PLAN_KEY}", **headers})

    def speak(gw, text):
        return requests.post(gw.url + "/v1/audio/speech", timeout=10,
                             json={"model": "image-demo", "input": text, "voice": "a"},
                             headers={"Authorization": f"Bearer {PLAN_KEY}"})

    assert [draw(gw, 2).status_code for gw in (a, b)] == [200, 200]   # 4 of 5
    assert draw(a, 1, **{"X-Demo-Status": "500"}).status_code >= 500  # given back
    [key] = quota_keys(module_redis, "mi")
    wait_until(lambda: module_redis.command("GET", key) == "4", "the failed share back")
    err = helpers.assert_error(draw(b, 2), 429, "rate_limited")
    assert "max_images_per_day" in err["message"] and 0 < err["retry_after"] <= 86400
    assert draw(a, 1).status_code == 200
    helpers.assert_error(draw(b, 1), 429, "rate_limited")
    assert module_redis.command("GET", key) == "5"
    assert 0 < module_redis.command("TTL", key) <= 86400 + 60

    assert speak(a, "eight ch").status_code == 200
    helpers.assert_error(speak(b, "eight ch"), 429, "rate_limited")
    assert speak(b, "four").status_code == 200
    [chars] = quota_keys(module_redis, "mc")
    assert module_redis.command("GET", chars) == "12"
