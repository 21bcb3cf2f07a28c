"""docs/public-openapi.json tells the truth: requests written as it documents them are
served by a real gateway, and the answers (errors and stream events included) match
the documented schemas."""
from __future__ import annotations

import json

import jsonschema
import pytest
import requests

from control_plane.api import public_openapi

DOC = json.loads(public_openapi.OUTPUT.read_text())
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def check(schema: dict, instance) -> None:
    jsonschema.Draft202012Validator({**DOC, **schema}, format_checker=FORMATS).validate(
        instance)


def operation(template: str, method: str) -> dict:
    return DOC["paths"][template][method]


def call(gw, key, method: str, template: str, path: str, body=None, **kw):
    op = operation(template, method)
    if body is not None:   # what we send is what the document describes
        check(op["requestBody"]["content"]["application/json"]["schema"], body)
    r = requests.request(method.upper(), gw.url + path, json=body, timeout=10,
                         headers={"Authorization": f"Bearer {key}"}, **kw)
    documented = op["responses"].get(str(r.status_code))
    assert documented, f"{method} {path}: status {r.status_code} is not documented"
    if r.headers.get("Content-Type", "").startswith("application/json"):
        check(documented["content"]["application/json"]["schema"], r.json())
    return r


CASES = [
    ("post", "/v1/chat/completions", "/v1/chat/completions",
     {"model": "chat-demo", "messages": [{"role": "user", "content": "hi"}],
      "max_tokens": 20, "temperature": 0.5}),
    ("post", "/v1/responses", "/v1/responses",
     {"model": "chat-demo", "input": [{"role": "user", "content": "hi"}],
      "max_output_tokens": 20, "metadata": {"team": "a"}}),
    ("get", "/v1/models", "/v1/models", None),
    ("get", "/v1/models/{model}", "/v1/models/chat-demo", None),
    ("post", "/v1/predict", "/v1/predict",
     {"api_version": "1.0", "model": "predict-demo", "model_type": "nlp/sentiment",
      "request_id": "doc-1", "params": {"input": ["great", "slow"]}}),
    ("post", "/api/v1/model/{model}/infer", "/api/v1/model/predict-demo/infer",
     {"input": ["a", "b"], "params": {"threshold": 0.5}}),
    ("post", "/api/v1/model/{model}/infer", "/api/v1/model/chat-demo/infer",
     {"input": "hello"}),
    ("post", "/v1/models/{model}/predict", "/v1/models/predict-demo/predict",
     {"instances": ["a cat"]}),
    ("post", "/v2/models/{model}/infer", "/v2/models/predict-demo/infer",
     {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["nice"]}]}),
    ("post", "/v1/messages", "/v1/messages",
     {"model": "chat-demo", "max_tokens": 20, "system": "be brief",
      "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
    ("post", "/v1/messages/count_tokens", "/v1/messages/count_tokens",
     {"model": "chat-demo", "messages": [{"role": "user", "content": "hi"}]}),
]


@pytest.mark.parametrize("method, template, path, body", CASES,
                         ids=[f"{c[0]} {c[2]}" for c in CASES])
def test_documented_requests_get_documented_answers(served, helpers, method, template,
                                                    path, body):
    r = call(served, helpers.KEY, method, template, path, body)
    assert r.status_code == 200, r.text
    assert r.headers["X-Request-Id"]


def test_errors_are_documented(served, helpers):
    chat = {"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}
    assert call(served, helpers.KEY, "post", "/v1/chat/completions",
                "/v1/chat/completions", chat).status_code == 404
    assert call(served, "sk-wrong-key-0123456789", "post", "/v1/chat/completions",
                "/v1/chat/completions", {**chat, "model": "chat-demo"}).status_code == 403
    assert call(served, helpers.KEY_LIMITED, "get", "/v1/models/{model}",
                "/v1/models/predict-demo").status_code in (403, 404)
    # the Messages API's errors are Anthropic's (the AnthropicError schema)
    messages = {"model": "no-such-model", "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi"}]}
    assert call(served, helpers.KEY, "post", "/v1/messages", "/v1/messages",
                messages).status_code == 404
    assert call(served, helpers.KEY, "post", "/v1/messages", "/v1/messages",
                {**messages, "model": "chat-demo", "messages": [{"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "none", "content": "x"}]}]}
                ).status_code == 400


def test_stream_events_match_the_chunk_schema(served, helpers):
    body = {"model": "chat-demo", "messages": [{"role": "user", "content": "one two"}],
            "stream": True, "stream_options": {"include_usage": True}}
    r = call(served, helpers.KEY, "post", "/v1/chat/completions", "/v1/chat/completions",
             body, stream=True)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    events = [line[5:].strip() for line in r.iter_lines(decode_unicode=True)
              if line.startswith("data:")]
    assert events[-1] == "[DONE]" and len(events) > 2
    for event in events[:-1]:
        check({"$ref": "#/components/schemas/ChatCompletionChunk"}, json.loads(event))
