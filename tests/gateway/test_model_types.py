"""Brief 000's envelope as the brief writes it: `model_type`, no `model`; the
snapshot's model-type map chooses the model (or route); `model`, when present, wins."""
from __future__ import annotations

import uuid

import pytest
import requests


@pytest.fixture
def typed(gateway, helpers, backends):
    snap = helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "sentiment-demo": (5000, [backends["predict-a"].entry(2)]),
    })
    snap["model_types"] = {"nlp/sentiment": "sentiment-demo", "nlp/chat": "chat-demo"}
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    return gateway


def predict(gw, helpers, body):
    return requests.post(gw.url + "/v1/predict", json=body, timeout=10,
                         headers={"Authorization": f"Bearer {helpers.KEY}"})


def test_brief_envelope_by_model_type(typed, helpers):
    rid = str(uuid.uuid4())
    r = predict(typed, helpers, {"api_version": "1.0", "model_type": "nlp/sentiment",
                                 "params": {"input": ["great service"]},
                                 "request_id": rid})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "sentiment-demo" and body["model_type"] == "nlp/sentiment"
    assert body["request_id"] == rid and len(body["outputs"]) == 1
    assert r.headers["X-Demo-Backend"] == "predict-a"


def test_model_wins_over_model_type(typed, helpers):
    r = predict(typed, helpers, {"api_version": "1.0", "model": "chat-demo",
                                 "model_type": "nlp/sentiment",
                                 "params": {"input": "hello"}})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "chat-demo" and r.headers["X-Demo-Backend"] == "openai-a"


def test_unknown_or_missing_model_type(typed, helpers):
    r = predict(typed, helpers, {"api_version": "1.0", "model_type": "cv/detection",
                                 "params": {"input": [1]}})
    err = helpers.assert_error(r, 404, "not_found")
    assert "cv/detection" in err["message"]
    r = predict(typed, helpers, {"api_version": "1.0", "params": {"input": [1]}})
    helpers.assert_error(r, 400, "invalid_request")


def test_snapshot_with_a_bad_model_type_map_is_refused(gateway, helpers, backends):
    snap = helpers.make_snapshot(1, {"chat-demo": (5000, [backends["openai-a"].entry(1)])})
    snap["model_types"] = {"nlp/chat": 5}
    r = gateway.push(snap)
    assert r.status_code == 400 and "model_types" in r.text
