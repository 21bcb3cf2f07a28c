"""Audio and image models in the admin API and the snapshot (issue 25): the work a
model does (media_tasks) and the largest body it takes (max_request_bytes)."""
from __future__ import annotations


def test_media_fields_reach_the_snapshot(api, make):
    model = make("model", name="asr-x", media_tasks=["transcription", "translation",
                                                      "transcription"],
                 max_request_bytes=50 * 1024 * 1024)
    assert model["media_tasks"] == ["transcription", "translation"]
    assert model["max_request_bytes"] == 50 * 1024 * 1024
    chat = make("model", name="chat-x")
    assert (chat["media_tasks"], chat["max_request_bytes"]) == (None, None)
    snap = api("get", "/snapshot").get_json()
    m = snap["models"]["asr-x"]
    assert (m["media_tasks"], m["max_request_bytes"]) == (["transcription", "translation"],
                                                          50 * 1024 * 1024)
    assert "media_tasks" not in snap["models"]["chat-x"]
    r = api("patch", f"/models/{model['id']}", json={"media_tasks": None,
                                                     "max_request_bytes": None})
    assert r.status_code == 200, r.get_json()
    assert "media_tasks" not in api("get", "/snapshot").get_json()["models"]["asr-x"]


def test_bad_media_fields_name_the_field(api, make):
    for bad in ({"media_tasks": ["dance"]}, {"media_tasks": "speech"},
                {"max_request_bytes": 0}):
        r = api("post", "/models", json={"name": "m-bad", **bad})
        assert r.status_code == 422, r.get_json()
        assert set(r.get_json()["error"]["fields"]) == set(bad), r.get_json()


def test_a_mapping_s_transport_reaches_the_snapshot(api):
    body = {"name": "asr-raw", "path": "/v1/recognize", "request": {},
            "response": {"output": "/result/0/transcript", "duration": "/duration",
                         "error": "/error_msg"},
            "transport": {"upload": "raw", "content_type": "audio/wav",
                          "query": {"lang": "{{params.language}}"},
                          "defaults": {"language": "zh"}}}
    r = api("post", "/mappings", json=body)
    assert r.status_code == 201, r.get_json()
    assert r.get_json()["transport"] == body["transport"]
    m = api("get", "/snapshot").get_json()["mappings"]["asr-raw"]
    assert m == {"path": "/v1/recognize", "request": {}, "response": body["response"],
                 **body["transport"]}
    for bad in ({"transport": {"upload": "ftp"}}, {"transport": {"query": {"a": [1]}}},
                {"response": {"output": "/x", "audio": "nope"}}):
        r = api("post", "/mappings", json={**body, "name": "m-bad", **bad})
        assert r.status_code == 422, r.get_json()
        assert set(r.get_json()["error"]["fields"]) == set(bad), r.get_json()


def test_a_plan_s_daily_media_caps_reach_the_snapshot(api, make):
    caps = {"max_audio_seconds_per_day": 3600, "max_speech_chars_per_day": 100000,
            "max_images_per_day": 50}
    plan = make("plan", name="voice", **caps)
    assert {k: plan[k] for k in caps} == caps
    plain = make("plan", name="plain")
    assert all(plain[k] is None for k in caps)
    snap = api("get", "/snapshot").get_json()
    assert {k: snap["plans"][str(plan["id"])][k] for k in caps} == caps
    assert not set(caps) & set(snap["plans"][str(plain["id"])])
    r = api("post", "/plans", json={"name": "bad", "max_images_per_day": 0})
    assert r.status_code == 422 and "max_images_per_day" in r.get_json()["error"]["fields"]
