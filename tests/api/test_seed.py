"""Demo data: seed() (models and a key, for tests and scripts) and the demo fleet
`sluice up` loads through the admin API (control_plane/demo/fleet.py)."""
from __future__ import annotations

from types import SimpleNamespace

from sqlalchemy.orm import Session

from control_plane.db import make_engine
from control_plane.demo import fleet
from control_plane.clients.admin import AdminClient
from control_plane.services.seed import seed

DEMO = {"chat-demo": [{"name": "openai-1", "url": "http://127.0.0.1:9101",
                       "protocol": "openai"}],
        "predict-demo": [{"name": "predict-1", "url": "http://127.0.0.1:9102",
                          "protocol": "predict", "weight": 50}]}


def test_seed_is_idempotent_and_shows_in_snapshot(db_url, api):
    engine = make_engine(db_url)
    try:
        with Session(engine) as session:
            first = seed(session, DEMO, key="sk-demo-key-0123456789")
        with Session(engine) as session:
            again = seed(session, DEMO, key="sk-demo-key-0123456789")
    finally:
        engine.dispose()
    assert first.key == again.key == "sk-demo-key-0123456789"
    assert again.version == first.version  # nothing new, no bump
    snap = api("get", "/snapshot").get_json()
    assert snap["version"] == first.version
    assert sorted(snap["models"]) == ["chat-demo", "predict-demo"]
    assert snap["models"]["predict-demo"]["backends"][0]["weight"] == 50
    assert [k["prefix"] for k in snap["keys"].values()] == ["sk-demo-ke"]


def test_seed_generates_a_key_once(db_url):
    engine = make_engine(db_url)
    try:
        with Session(engine) as session:
            first = seed(session, {}, consumer="ops")
        with Session(engine) as session:
            again = seed(session, {}, consumer="ops")
    finally:
        engine.dispose()
    assert first.key.startswith("sk-") and again.key is None


class _AppAdmin(AdminClient):
    """The AdminClient `sluice up` seeds with, over the Flask test client instead of
    a socket: same calls, same app, same database."""

    def __init__(self, client, auth):
        self.base, self.client, self.auth = "/api/v1", client, auth

    def _call(self, method, path, **kw):
        resp = self.client.open(self.base + path, method=method, headers=self.auth,
                                json=kw.get("json"))
        assert resp.status_code < 400, (method, path, resp.get_json())
        return SimpleNamespace(json=resp.get_json)


def test_demo_fleet_seeds_every_feature_once(client, auth, api):
    admin = _AppAdmin(client, auth)
    urls = {b["name"]: f"http://127.0.0.1:{9200 + i}"
            for i, b in enumerate(fleet.DEMO_BACKENDS)}
    keys = fleet.seed(admin, urls, {})
    version = admin.config_version()
    assert fleet.seed(admin, urls, keys) == keys          # a second run reuses the keys
    assert admin.config_version() == version              # ... and changes nothing

    snap = api("get", "/snapshot").get_json()
    assert snap["routes"]["chat"]["versions"] == [
        {"model": "chat-canary", "percent": 100,
         "conditions": [{"attr": "user_type", "op": "eq", "value": "vip"}]},
        {"model": "chat-demo", "percent": 90}, {"model": "chat-canary", "percent": 10}]
    assert snap["models"]["chat-slow"]["fallback_model"] == "chat-demo"
    assert snap["models"]["chat-demo"]["mask_pii"] is True
    assert [b["protocol"] for b in snap["models"][fleet.DEMO_ANTHROPIC_MODEL]["backends"]] == [
        "anthropic"]
    affinity = api("get", "/telemetry/affinity").get_json()["models"]
    assert [(m["model"], m["gpu_class"], [(b["backend"], b["eligible"]) for b in m["backends"]])
            for m in affinity] == [("sentiment-demo", "L4", [("sentiment-demo-a", True)])]
    assert {b["name"]: b.get("max_in_flight")
            for b in snap["models"]["chat-demo"]["backends"]} == {
        "chat-demo-a": 64, "chat-demo-b": 64}
    by_name = {c["name"]: c for c in snap["consumers"].values()}
    assert by_name["demo-vip"]["attributes"] == {"user_type": "vip"}
    assert snap["plans"][str(by_name["demo-vip"]["plan_id"])]["priority"] == "critical"
    assert snap["plans"][str(by_name["demo"]["plan_id"])]["priority"] == "standard"
    scraped = [b for b in admin.list("backends") if b["metrics_url"]]
    assert [(b["name"], b["metrics_url"], b["metrics_format"]) for b in scraped] == [
        ("chat-demo-a", urls["chat-demo-a"] + "/metrics", "vllm")]
    # audio and images: brief 000's ASR model over three vendor shapes, the model types
    asr = snap["models"]["asr-demo"]
    assert asr["media_tasks"] == ["transcription", "translation"]
    assert sorted((b["protocol"], b.get("mapping")) for b in asr["backends"]) == [
        ("openai", None), ("vendor", "asr-json"), ("vendor", "asr-raw")]
    assert snap["mappings"]["asr-raw"]["upload"] == "raw"
    assert {t: snap["model_types"][t] for t in ("asr/zh", "tts/zh", "cv/ocr")} == {
        "asr/zh": "asr-demo", "tts/zh": "tts-vendor", "cv/ocr": "ocr-demo"}
    assert sorted(k["prefix"] for k in snap["keys"].values()) == sorted(
        key[:10] for key in keys.values())
