"""Strict requests: the fields a protocol defines are checked before anything is
forwarded; a bad one is a 400 in the error template naming `param` (OpenAI's
invalid_request_error for OpenAI callers, so the official client raises
BadRequestError with `.param`); unknown fields pass through."""
from __future__ import annotations

import openai
import pytest
import requests


def _post(gw, helpers, path, body):
    return requests.post(gw.url + path, json=body, timeout=10,
                         headers={"Authorization": f"Bearer {helpers.KEY}"})


@pytest.fixture
def limited(gateway, helpers, backends):
    """chat-demo with max_output_tokens 100; predict-demo as usual."""
    snap = helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "predict-demo": (5000, [backends["predict-a"].entry(2)]),
    })
    snap["models"]["chat-demo"]["max_output_tokens"] = 100
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    return gateway


def chat(**extra):
    return {"model": "chat-demo", "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.mark.parametrize("body, param", [
    (chat(temperature="hot"), "temperature"),
    (chat(max_tokens=-5), "max_tokens"),
    (chat(max_tokens=10**18), "max_tokens"),
    (chat(max_completion_tokens=101), "max_completion_tokens"),   # the model's limit
    (chat(top_p=2), "top_p"),
    (chat(n=0), "n"),
    (chat(stop=["a", "b", "c", "d", "e"]), "stop"),
    (chat(stream="yes"), "stream"),
    ({"model": "chat-demo", "messages": "hi"}, "messages"),
    ({"model": "chat-demo", "messages": [{"role": "wizard", "content": "x"}]},
     "messages[0].role"),
    ({"model": "chat-demo", "messages": [{"role": "user",
                                          "content": [{"type": "video"}]}]},
     "messages[0].content[0].type"),
    (chat(tools=[{"type": "function", "function": {"name": "has space"}}]),
     "tools[0].function.name"),
])
def test_bad_openai_fields_are_400_naming_param(limited, helpers, body, param):
    r = _post(limited, helpers, "/v1/chat/completions", body)
    err = helpers.assert_error(r, 400, "invalid_request_error")
    assert err["param"] == param
    assert "injected" not in r.text and "X-Demo-Backend" not in r.headers   # not forwarded


def test_good_request_with_unknown_fields_passes(limited, helpers):
    r = _post(limited, helpers, "/v1/chat/completions",
              chat(max_tokens=100, temperature=0.5, stop=["x"], demo_unknown={"a": 1}))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]


def test_openai_client_raises_bad_request_with_param(limited, helpers):
    client = openai.OpenAI(base_url=limited.url + "/v1", api_key=helpers.KEY,
                           max_retries=0, timeout=10)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="chat-demo", temperature=5,
                                       messages=[{"role": "user", "content": "hi"}])
    assert info.value.param == "temperature"
    assert info.value.type == "invalid_request_error"
    assert info.value.body["request_id"] == info.value.response.headers["X-Request-Id"]


@pytest.mark.parametrize("path, body, param", [
    ("/v1/predict", {"api_version": "1.0", "model": "predict-demo",
                     "params": {"input": [1], "temperature": "hot"}}, "params.temperature"),
    ("/v1/predict", {"api_version": "2", "model": "predict-demo", "params": {"input": [1]}},
     "api_version"),
    ("/v1/predict", {"api_version": "1.0", "model": "predict-demo", "params": {}},
     "params.input"),
    ("/api/v1/model/predict-demo/infer", {"input": "x", "params": {"max_tokens": -5}},
     "params.max_tokens"),
    ("/api/v1/model/predict-demo/infer", {"params": {}}, "input"),
])
def test_seed_envelopes_are_strict_too(limited, helpers, path, body, param):
    err = helpers.assert_error(_post(limited, helpers, path, body), 400, "invalid_request")
    assert err["param"] == param
