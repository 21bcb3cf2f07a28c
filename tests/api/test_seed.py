"""seed(): what `sluice up` uses to put demo models and a key in place."""
from __future__ import annotations

from sqlalchemy.orm import Session

from control_plane.db import make_engine
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
