"""Content policies: term lists, global or per model -> 451 naming the policy."""
from __future__ import annotations

import requests


def serve(gateway_factory, helpers, backends, policies):
    gw = gateway_factory()
    snap = helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "predict-demo": (5000, [backends["predict-a"].entry(2)])})
    snap["content_policies"] = policies
    r = gw.push(snap)
    assert r.status_code == 200, r.text
    return gw


def chat_text(gw, helpers, text, model="chat-demo"):
    return requests.post(gw.url + "/v1/chat/completions", timeout=10,
                         headers={"Authorization": f"Bearer {helpers.KEY}"},
                         json={"model": model, "messages": [
                             {"role": "system", "content": "be nice"},
                             {"role": "user", "content": text}]})


def test_global_and_per_model_terms(gateway_factory, helpers, backends):
    gw = serve(gateway_factory, helpers, backends, [
        {"id": 1, "name": "no-secrets", "model": None, "terms": ["project falcon"]},
        {"id": 2, "name": "chat-only", "model": "chat-demo", "terms": ["forbidden word"]}])
    assert chat_text(gw, helpers, "hello there").status_code == 200
    r = chat_text(gw, helpers, "Tell me about PROJECT Falcon please")
    err = helpers.assert_error(r, 451, "policy_violation")
    assert "no-secrets" in err["message"] and "falcon" not in err["message"].lower()
    err = helpers.assert_error(chat_text(gw, helpers, "a Forbidden Word here"), 451,
                               "policy_violation")
    assert "chat-only" in err["message"]
    # the per-model list does not apply to predict-demo; the global one does
    def predict(items):
        return requests.post(gw.url + "/v1/models/predict-demo/predict", timeout=10,
                             json={"instances": items}, headers={"X-API-Key": helpers.KEY})
    assert predict(["forbidden word"]).status_code == 200
    helpers.assert_error(predict(["x", "project falcon"]), 451, "policy_violation")
    # counted per model and policy on /metrics
    m = requests.get(gw.internal_url + "/metrics", timeout=5,
                     headers={"Authorization": f"Bearer {gw.cfg.token}"}).text
    assert 'sluice_policy_refused_total{model="chat-demo",policy="no-secrets"} 1' in m
    assert 'sluice_policy_refused_total{model="chat-demo",policy="chat-only"} 1' in m
    assert 'sluice_policy_refused_total{model="predict-demo",policy="no-secrets"} 1' in m


def test_invalid_content_policies_are_refused(gateway_factory, helpers, backends):
    gw = gateway_factory()
    for bad in ("x", [{"name": "a", "terms": "x"}], [{"name": "a", "terms": [""]}],
                [{"name": "a", "model": 5, "terms": ["x"]}]):
        snap = helpers.make_snapshot(1, {"chat-demo": (5000, [backends["openai-a"].entry(1)])})
        snap["content_policies"] = bad
        r = gw.push(snap)
        assert r.status_code == 400 and "content_policies" in r.json()["error"]["message"]
