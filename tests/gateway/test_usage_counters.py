"""Usage counters per consumer, model and UTC day on the internal listener, and the
fleet's usage pushed back into the quota counters (lua/sluice/usage.lua)."""
from __future__ import annotations

import time

import requests

PLAN_KEY = "sk-test-usage-planned-0123456789"   # consumer 3, on plan 7


def serve(gateway_factory, helpers, backends, plan: dict):
    snap = helpers.make_snapshot(1, {"chat-demo": (5000, [backends["openai-a"].entry(1)])})
    snap["consumers"]["3"] = {"id": 3, "name": "planned", "allowed_models": None,
                              "plan_id": 7}
    snap["keys"][helpers.key_hash(PLAN_KEY)] = {"id": 9, "consumer_id": 3,
                                                "prefix": PLAN_KEY[:10], "expires_at": None}
    snap["plans"] = {"7": {"id": 7, "name": "p", **plan}}
    gw = gateway_factory()
    r = gw.push(snap)
    assert r.status_code == 200, r.text
    return gw


def today() -> tuple[str, str]:
    t = time.gmtime()
    return time.strftime("%Y%m%d", t), time.strftime("%Y%m", t)


def predict(gw, key):
    return requests.post(gw.url + "/v1/models/predict-demo/predict",
                         json={"instances": ["good"]},
                         headers={"Authorization": f"Bearer {key}"}, timeout=10)


def test_requests_and_tokens_counted_per_consumer_model_and_day(gateway_factory, helpers, backends):
    gateway = gateway_factory()  # it counts usage from zero: a gateway of its own
    day, _ = today()
    snap = helpers.make_snapshot(1, {"chat-demo": (5000, [backends["openai-a"].entry(1)]),
                                     "predict-demo": (5000, [backends["predict-a"].entry(2)])})
    snap["consumers"]["1"]["plan_id"] = 7    # alice: on a plan without limits
    snap["plans"] = {"7": {"id": 7, "name": "p"}}
    assert gateway.push(snap).status_code == 200
    served = gateway
    before = served.usage()
    assert before["counters"] == {} and before["boot"] and before["seed_version"] == 0
    sums = [0, 0, 0]
    for text in ("hello there", "one two three four", "x"):
        r = helpers.chat(served, messages=[{"role": "user", "content": text}])
        assert r.status_code == 200, r.text
        u = r.json()["usage"]
        sums = [sums[0] + u["prompt_tokens"], sums[1] + u["completion_tokens"],
                sums[2] + u["total_tokens"]]
    assert predict(served, helpers.KEY).status_code == 200
    # refused before the plan check: not counted (bob may not use predict-demo)
    assert predict(served, helpers.KEY_LIMITED).status_code == 403
    assert helpers.chat(served, key=helpers.KEY_LIMITED).status_code == 200

    got = served.usage()
    assert got["boot"] == before["boot"]
    assert got["counters"] == {
        # then audio ms, characters, images, realtime session seconds (test_media.py,
        # test_realtime.py)
        f"{day}|1|chat-demo": [3, *sums, 0, 0, 0, 0],
        f"{day}|1|predict-demo": [1, 0, 0, 0, 0, 0, 0, 0],
        f"{day}|2|chat-demo": [1, 0, 0, 0, 0, 0, 0, 0],    # bob has no plan: requests, not tokens
    }
    assert sums[2] > 0


def test_boot_survives_reload_not_restart(gateway_factory, default_snapshot, helpers):
    served = gateway_factory()  # it restarts nginx: a gateway of its own
    assert served.push(default_snapshot).status_code == 200
    assert helpers.chat(served).status_code == 200
    first = served.usage()
    served.reload()
    after_reload = served.usage()
    assert after_reload["boot"] == first["boot"]
    assert after_reload["counters"] == first["counters"]
    served.stop()
    served.start()
    restarted = served.usage()
    assert restarted["snapshot_version"] == 1    # from the last-known-good file
    assert restarted["boot"] != first["boot"]
    assert restarted["started_at"] > first["started_at"]
    assert restarted["counters"] == {}


def test_pushed_usage_fills_the_quota_counters(gateway_factory, helpers, backends):
    gw = serve(gateway_factory, helpers, backends,
               {"daily_requests": 5, "monthly_requests": 100})
    day, month = today()
    boot = gw.usage()["boot"]
    body = {"boot": boot, "version": 1, "day": day, "month": month,
            "usage": {"3": {"chat-demo": [4, 4, 0]}, "99": {"chat-demo": [50, 50, 0]}}}
    r = gw.push_usage(body)
    assert r.status_code == 200 and r.json() == {"version": 1}, r.text
    got = gw.usage()
    assert (got["seed_version"], got["seed_snapshot"], got["snapshot_version"]) == (1, 1, 1)
    assert got["offsets"] == {f"qd:3:*:{day}": 4, f"qm:3:*:{month}": 4}   # 99: no such consumer
    assert helpers.chat(gw, key=PLAN_KEY).status_code == 200        # 4 + 1 = 5
    err = helpers.assert_error(helpers.chat(gw, key=PLAN_KEY), 429, "rate_limited")
    assert "daily request quota" in err["message"]

    # the fleet's figure went down (a correction): the difference comes back
    r = gw.push_usage({**body, "version": 2, "usage": {"3": {"chat-demo": [2, 2, 0]}}})
    assert r.status_code == 200, r.text
    assert [helpers.chat(gw, key=PLAN_KEY).status_code for _ in range(3)] == [200, 200, 429]

    # another boot's figures, a replayed version, a malformed body: refused, no effect
    r = gw.push_usage({**body, "version": 3, "boot": "0123456789abcdef"})
    helpers.assert_error(r, 409, "conflict")
    helpers.assert_error(gw.push_usage({**body, "version": 2}), 409, "conflict")
    helpers.assert_error(gw.push_usage({**body, "version": 4, "usage": {"3": 5}}), 400,
                         "invalid_request")
    # a push for another day leaves today's counter alone
    r = gw.push_usage({**body, "version": 5, "day": "20000101",
                       "usage": {"3": {"chat-demo": [0, 2, 0]}}})
    assert r.status_code == 200, r.text
    assert [helpers.chat(gw, key=PLAN_KEY).status_code for _ in range(3)] == [200, 200, 429]


def test_pushed_tokens_fill_the_monthly_token_quota(gateway_factory, helpers, backends):
    gw = serve(gateway_factory, helpers, backends, {"monthly_tokens": 3000})
    day, month = today()
    boot = gw.usage()["boot"]
    # a request reserves body/4 + 1024 tokens: fits under 3000 until 2000 are used
    assert helpers.chat(gw, key=PLAN_KEY).status_code == 200
    r = gw.push_usage({"boot": boot, "version": 1, "day": day, "month": month,
                       "usage": {"3": {"chat-demo": [0, 0, 2000]}}})
    assert r.status_code == 200, r.text
    err = helpers.assert_error(helpers.chat(gw, key=PLAN_KEY), 429, "rate_limited")
    assert "token quota" in err["message"]


def test_pushed_usage_fills_the_daily_media_caps(gateway, helpers, backends):
    """After a restart the fleet's audio, speech and images of today count against the
    plan's daily caps (on the module's gateway: a consumer of its own, the next usage
    version)."""
    snap = helpers.make_snapshot(1, {"image-demo": (5000, [backends["openai-a"].entry(1)])})
    snap["models"]["image-demo"]["media_tasks"] = ["image", "speech"]
    helpers.add_planned(snap, PLAN_KEY, {"max_images_per_day": 5,
                                         "max_speech_chars_per_day": 10,
                                         "max_audio_seconds_per_day": 60}, consumer_id=43)
    assert gateway.push(snap).status_code == 200
    day, month = today()
    got = gateway.usage()
    r = gateway.push_usage({"boot": got["boot"], "version": got["seed_version"] + 1,
                            "day": day, "month": month,
                            "usage": {"43": {"image-demo": [3, 3, 0, 2500, 7, 4]}}})
    assert r.status_code == 200, r.text
    assert {k: v for k, v in gateway.usage()["offsets"].items() if k[0] == "m"} == {
        f"ma:43:{day}": 2500, f"mc:43:{day}": 7, f"mi:43:{day}": 4}
    h = {"Authorization": f"Bearer {PLAN_KEY}"}

    def draw():
        return requests.post(gateway.url + "/v1/images/generations", headers=h, timeout=10,
                             json={"model": "image-demo", "prompt": "p"})

    def speak(text):
        return requests.post(gateway.url + "/v1/audio/speech", headers=h, timeout=10,
                             json={"model": "image-demo", "input": text, "voice": "a"})

    assert draw().status_code == 200                    # 4 + 1 = 5
    helpers.assert_error(draw(), 429, "rate_limited")
    helpers.assert_error(speak("four"), 429, "rate_limited")   # 7 + 4 > 10
    assert speak("abc").status_code == 200


def test_usage_push_without_a_snapshot_is_refused(gateway_factory, helpers):
    gateway = gateway_factory()  # it needs one with no snapshot: a gateway of its own
    day, month = today()
    r = gateway.push_usage({"boot": gateway.usage()["boot"], "version": 1, "day": day,
                            "month": month, "usage": {}})
    helpers.assert_error(r, 503, "backend_unavailable")
    assert gateway.usage()["seed_version"] == 0
