"""Callers × backends: every caller-facing endpoint against every backend protocol,
through the real gateway to real demo backends; conversions both ways, byte-exact
non-ASCII text, impossible pairs and vendor errors in the error template."""
from __future__ import annotations

import json
import uuid

import pytest
import requests

from control_plane.demo.protocols import prediction

TEXT = "你好 world 🚀 café"

MAPPINGS = {
    "vendor-a": {"path": "/generate", "request": {"text": "{{input}}"},
                 "response": {"output": "/result/text", "error": "/err/msg"}},
    "vendor-b": {"path": "/api/infer",
                 "request": {"content": "{{input}}", "lang": "cn",
                             "temperature": "{{params.temperature}}"},
                 "response": {"output": "/data/answer", "error": "/msg"}},
}

# model name -> the backend (protocol_backends key) and snapshot overrides
MODELS = {
    "llm": ("openai", {}),
    "v2": ("kserve_v2", {}),
    "tf": ("tfserving", {}),
    "kv1": ("predict", {}),
    "va": ("vendor-a", {"protocol": "vendor", "mapping": "vendor-a"}),
    "vb": ("vendor-b", {"protocol": "vendor", "mapping": "vendor-b"}),
}

CALLERS = ("chat", "completions", "unified", "infer", "predict", "v2")


def expected(model: str, caller: str, text: str):
    """What the model answers for `text`, in internal form (a string or an object)."""
    text_kind = caller in ("chat", "completions")
    if model == "llm":
        return "echo: " + text
    if model == "va":
        return "A: " + text
    if model == "vb":
        return "B[cn]: " + text
    if model == "v2":
        if text_kind:
            return "v2: " + text
        p = prediction(text)
        return {"label": p["label"], "score": p["score"]}
    return prediction(text)


@pytest.fixture
def adapters_gw(gateway, helpers, protocol_backends):
    models = {name: (5000, [protocol_backends[b].entry(i + 1, **over)])
              for i, (name, (b, over)) in enumerate(MODELS.items())}
    r = gateway.push(helpers.make_snapshot(1, models, mappings=MAPPINGS))
    assert r.status_code == 200, r.text
    return gateway


def call(gw, key, caller: str, model: str, text: str, headers=None, **extra):
    """POST `text` to `model` through the `caller` endpoint; returns the response."""
    h = {"Authorization": f"Bearer {key}", **(headers or {})}
    if caller == "chat":
        path, body = "/v1/chat/completions", {
            "model": model, "messages": [{"role": "system", "content": "be brief"},
                                         {"role": "user", "content": text}]}
    elif caller == "completions":
        path, body = "/v1/completions", {"model": model, "prompt": text}
    elif caller == "unified":
        path, body = "/v1/predict", {"api_version": "1.0", "model_type": "nlp/text",
                                     "model": model, "request_id": str(uuid.uuid4()),
                                     "params": {"input": [text], "temperature": 0}}
    elif caller == "infer":
        path, body = f"/api/v1/model/{model}/infer", {
            "input": text, "params": {"max_length": 50, "temperature": 0.7}}
    elif caller == "predict":
        path, body = f"/v1/models/{model}/predict", {"instances": [text]}
    else:
        path, body = f"/v2/models/{model}/infer", {
            "id": "req-1", "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                       "data": [text]}]}
    body.update(extra)
    return requests.post(gw.url + path, json=body, headers=h, timeout=10), body


def output_of(caller: str, r: requests.Response, sent: dict):
    """The single output in the caller's protocol shape, in internal form."""
    doc = r.json()
    if caller == "chat":
        assert doc["object"] == "chat.completion"
        content = doc["choices"][0]["message"]["content"]
        return content
    if caller == "completions":
        return doc["choices"][0]["text"]
    if caller == "unified":
        assert doc["api_version"] == "1.0"
        assert doc["request_id"] == sent["request_id"]
        assert doc["model_type"] == "nlp/text"
        return doc["outputs"][0]
    if caller == "infer":
        return doc["output"]
    if caller == "predict":
        return doc["predictions"][0]
    tensors = doc["outputs"]
    assert all(t["shape"] == [1] for t in tensors)
    if len(tensors) == 1 and tensors[0]["name"] == "output":
        return tensors[0]["data"][0]
    return {t["name"]: t["data"][0] for t in tensors}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("caller", CALLERS)
def test_caller_backend_matrix(adapters_gw, helpers, caller, model):
    r, sent = call(adapters_gw, helpers.KEY, caller, model, TEXT)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    want = expected(model, caller, TEXT)
    got = output_of(caller, r, sent)
    if isinstance(want, dict) and isinstance(got, str):
        got = json.loads(got)          # a prediction object as an LLM caller's text
    assert got == want
    if isinstance(want, str):
        # non-ASCII crosses every conversion as raw UTF-8, byte for byte
        assert want.encode("utf-8") in r.content


def test_chat_usage_is_reported_for_converted_answers(adapters_gw, helpers):
    r, _ = call(adapters_gw, helpers.KEY, "chat", "va", "one two three")
    usage = r.json()["usage"]
    # estimated from whitespace words: 3 in, "A: one two three" = 4 out
    assert usage == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


def test_template_parameters_reach_the_vendor(adapters_gw, helpers, protocol_backends):
    # vendor-b refuses any lang but "cn": the mapping's constant got there
    r, _ = call(adapters_gw, helpers.KEY, "infer", "vb", "x")
    assert r.status_code == 200 and r.json()["output"] == "B[cn]: x"


def test_infer_list_input_gives_list_output(adapters_gw, helpers):
    r = requests.post(adapters_gw.url + "/api/v1/model/tf/infer",
                      json={"input": ["a", "bb"]},
                      headers={"X-API-Key": helpers.KEY}, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["output"] == [prediction("a"), prediction("bb")]


def test_v2_numeric_tensor_to_tfserving_and_back(adapters_gw, helpers):
    body = {"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP64",
                        "data": [1, 2, 3, 4.5]}]}
    r = requests.post(adapters_gw.url + "/v2/models/tf/infer", json=body,
                      headers={"X-API-Key": helpers.KEY}, timeout=10)
    assert r.status_code == 200, r.text
    tensors = {t["name"]: t for t in r.json()["outputs"]}
    assert tensors["length"]["data"] == [2, 2]
    assert tensors["label"]["data"] == [prediction([1, 2])["label"],
                                        prediction([3, 4.5])["label"]]


@pytest.mark.parametrize("path, body, words", [
    ("/v1/embeddings", {"model": "va", "input": "x"}, ["embeddings"]),
    ("/v1/predict", {"api_version": "1.0", "model": "va", "params": {"input": ["a", "b"]}},
     ["one input"]),
    ("/v1/predict", {"api_version": "1.0", "model": "v2", "params": {"input": [{"a": 1}]}},
     ["KServe v2"]),
    ("/v1/models/llm/predict", {"instances": [1, 2]}, ["one text input"]),
    ("/v1/predict", {"api_version": "2.0", "model": "tf", "params": {"input": [1]}},
     ["api_version"]),
    ("/api/v1/model/tf/infer", {"params": {}}, ["input"]),
    ("/v2/models/tf/infer", {"inputs": [{"name": "x", "shape": [3], "datatype": "FP64",
                                         "data": [1]}]}, ["inputs[0]"]),
])
def test_impossible_or_invalid_pairs_are_400(adapters_gw, helpers, path, body, words):
    r = requests.post(adapters_gw.url + path, json=body, headers={"X-API-Key": helpers.KEY},
                      timeout=10)
    err = helpers.assert_error(r, 400, "invalid_request")
    for w in words:
        assert w in err["message"]


@pytest.mark.parametrize("model, injected, status, err_type", [
    ("va", 400, 400, "invalid_request"),
    ("vb", 400, 400, "invalid_request"),
    ("vb", 429, 429, "rate_limited"),
    ("va", 401, 502, "backend_error"),
    ("v2", 404, 502, "backend_error"),
    ("tf", 422, 400, "invalid_request"),
    ("vb", 500, 502, "backend_error"),
])
def test_vendor_errors_become_the_template(adapters_gw, helpers, model, injected, status,
                                          err_type):
    r, _ = call(adapters_gw, helpers.KEY, "chat", model, "x",
                headers={"X-Demo-Status": str(injected)})
    err = helpers.assert_error(r, status, err_type)
    assert str(injected) in err["message"]
    # the vendor's own message, found through the mapping's error pointer (5xx too)
    assert f"injected status {injected}" in err["message"]


def test_models_lists_only_what_the_key_may_use(adapters_gw, helpers):
    r = requests.get(adapters_gw.url + "/v1/models",
                     headers={"Authorization": f"Bearer {helpers.KEY}"}, timeout=10)
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == sorted(MODELS)
    r = requests.get(adapters_gw.url + "/v1/models",
                     headers={"Authorization": f"Bearer {helpers.KEY_LIMITED}"}, timeout=10)
    assert r.status_code == 200
    assert r.json() == {"object": "list", "data": []}   # bob may only use chat-demo
    r = requests.get(adapters_gw.url + "/v1/models/va",
                     headers={"Authorization": f"Bearer {helpers.KEY_LIMITED}"}, timeout=10)
    helpers.assert_error(r, 404, "not_found")
    r = requests.get(adapters_gw.url + "/v1/models", timeout=10)
    helpers.assert_error(r, 401, "unauthorized")
