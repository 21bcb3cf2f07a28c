"""The Anthropic Messages API (`POST /v1/messages`) through the real gateway, with the
official `anthropic` client unchanged: to a backend of the `anthropic` protocol (the
demo's, passed through) and to an OpenAI-chat backend (converted both ways), plain
and streamed, tool use round trips, its error classes, and bad input named by param.
Backend protocol `anthropic` from OpenAI callers: test_anthropic_backend.py."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from types import SimpleNamespace

import anthropic
import pytest
import requests

from control_plane.runtime import procs

REPO = Path(__file__).resolve().parents[2]
BACKEND_KEY = "sk-ant-backend-0123456789"
PLAN_KEY = "sk-test-anthropic-plan-0123456789"
TOOLS = [{"name": "lookup", "description": "Look something up",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}},
                           "required": ["query"]}}]


@pytest.fixture(scope="module")
def anthropic_backend(tmp_path_factory):
    """The demo's Anthropic-protocol backend."""
    port = procs.free_port()
    log = tmp_path_factory.mktemp("anthropic-backend") / "backend.log"
    proc = procs.spawn([sys.executable, "-m", "control_plane.demo.backends", "--protocol",
                        "anthropic", "--port", str(port), "--name", "claude-a"], log=log, cwd=REPO)
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
        yield SimpleNamespace(entry=lambda id, **over: {
            "id": id, "name": "claude-a", "protocol": "anthropic", "scheme": "http",
            "host": "127.0.0.1", "port": port, "host_header": f"localhost:{port}",
            "base_path": "", "weight": 100, **over})
    finally:
        procs.stop(proc)


def snapshot(helpers, backends, anthropic_backend, version=1, extra_models=None):
    models = {
        "claude": (5000, [anthropic_backend.entry(1, auth_header=BACKEND_KEY)]),
        "gpt": (5000, [backends["openai-a"].entry(2)]),
        "kv1": (5000, [backends["predict-a"].entry(3)]),
        **(extra_models or {}),
    }
    snap = helpers.make_snapshot(version, models)
    snap["models"]["claude"]["max_output_tokens"] = 64
    return helpers.add_planned(snap, PLAN_KEY, {"rate_per_second": 0.01, "burst": 1})


@pytest.fixture
def gw(gateway, helpers, backends, anthropic_backend):
    r = gateway.push(snapshot(helpers, backends, anthropic_backend))
    assert r.status_code == 200, r.text
    return gateway


@pytest.fixture
def client(gw, helpers):
    return anthropic.Anthropic(base_url=gw.url, api_key=helpers.KEY, max_retries=0)


def post(gw, key, body, path="/v1/messages", headers=None):
    h = {"x-api-key": key, "anthropic-version": "2023-06-01", **(headers or {})}
    return requests.post(gw.url + path, json=body, headers=h, timeout=10)


def assert_anthropic_error(r, status: int, err_type: str) -> dict:
    """Anthropic's error shape, with the gateway's request id."""
    assert r.status_code == status, r.text
    doc = r.json()
    assert doc["type"] == "error", doc
    assert doc["error"]["type"] == err_type, doc
    assert doc["error"]["message"]
    assert doc["request_id"] == r.headers["X-Request-Id"]
    return doc["error"]


@pytest.mark.parametrize("model", ["claude", "gpt"])
def test_messages_create(client, model):
    msg = client.messages.create(model=model, max_tokens=50, system="be brief",
                                 messages=[{"role": "user", "content": "hello there 你好"}])
    assert msg.type == "message" and msg.role == "assistant"
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == "echo: hello there 你好"
    assert msg.stop_reason == "end_turn"
    # words: "be brief" (system, lifted out for the OpenAI backend) + 3 of the turn
    assert msg.usage.input_tokens == 5
    assert msg.usage.output_tokens == 4


def test_native_backend_gets_its_key_as_x_api_key(gw, helpers):
    r = post(gw, helpers.KEY, {"model": "claude", "max_tokens": 5,
                               "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    assert r.headers["X-Demo-Api-Key-Sha256"] == hashlib.sha256(BACKEND_KEY.encode()).hexdigest()
    assert r.headers["X-Demo-Anthropic-Version"] == "2023-06-01"


@pytest.mark.parametrize("model", ["claude", "gpt"])
def test_messages_stream(client, model):
    with client.messages.stream(model=model, max_tokens=50,
                                messages=[{"role": "user", "content": "one two three"}]) as s:
        events = [e.type for e in s]
        final = s.get_final_message()
    text = "".join(b.text for b in final.content if b.type == "text")
    assert text == "echo: one two three"
    assert events[0] == "message_start"
    assert events[-1] == "message_stop"
    assert "content_block_start" in events and "content_block_stop" in events
    assert events[-2] == "message_delta"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 4
    assert final.usage.input_tokens == 3


def test_tool_use_round_trip_native(client):
    """Use a tool, answer its result: the demo backend's tool rule through the gateway."""
    msg = client.messages.create(model="claude", max_tokens=50, tools=TOOLS,
                                 messages=[{"role": "user", "content": "use a tool weather in Paris"}])
    assert msg.stop_reason == "tool_use"
    use = msg.content[-1]
    assert use.type == "tool_use" and use.name == "lookup"
    assert use.input == {"query": "weather in Paris"}
    turn2 = [{"role": "user", "content": "use a tool weather in Paris"},
             {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                           "content": "sunny, 21 C"}]}]
    again = client.messages.create(model="claude", max_tokens=50, tools=TOOLS, messages=turn2)
    assert again.content[0].text == "tool said: sunny, 21 C"
    assert again.stop_reason == "end_turn"


def test_tool_use_streamed_native(client):
    with client.messages.stream(model="claude", max_tokens=50, tools=TOOLS,
                                messages=[{"role": "user", "content": "use a tool 天气"}]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.content[-1].input == {"query": "天气"}


def test_error_classes(gw, client, helpers):
    nokey = anthropic.Anthropic(base_url=gw.url, api_key="sk-nobody-0123456789", max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError):   # an unknown key: 403
        nokey.messages.create(model="claude", max_tokens=5,
                              messages=[{"role": "user", "content": "hi"}])
    r = requests.post(gw.url + "/v1/messages", json={"model": "claude", "max_tokens": 5,
                      "messages": [{"role": "user", "content": "hi"}]}, timeout=10)
    assert_anthropic_error(r, 401, "authentication_error")
    with pytest.raises(anthropic.AuthenticationError):   # no key at all: 401
        client.messages.create(model="claude", max_tokens=5, extra_headers={
            "X-Api-Key": anthropic.omit}, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.NotFoundError) as exc:
        client.messages.create(model="no-such-model", max_tokens=5,
                               messages=[{"role": "user", "content": "hi"}])
    assert exc.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as exc:
        client.messages.create(model="claude", max_tokens=5, temperature=1.5,
                               messages=[{"role": "user", "content": "hi"}])
    assert exc.value.body["error"]["param"] == "temperature"
    planned = anthropic.Anthropic(base_url=gw.url, api_key=PLAN_KEY, max_retries=0)
    # a malformed request is refused before the plan counts it (its burst is 1)
    with pytest.raises(anthropic.BadRequestError):
        planned.messages.create(model="claude", max_tokens=0,
                                messages=[{"role": "user", "content": "hi"}])
    planned.messages.create(model="claude", max_tokens=5,
                            messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.RateLimitError) as exc:
        planned.messages.create(model="claude", max_tokens=5,
                                messages=[{"role": "user", "content": "hi"}])
    assert exc.value.response.headers["Retry-After"]
    assert exc.value.body["error"]["type"] == "rate_limit_error"


def test_max_tokens_is_required(gw, helpers):
    r = post(gw, helpers.KEY, {"model": "gpt", "messages": [{"role": "user", "content": "hi"}]})
    err = assert_anthropic_error(r, 400, "invalid_request_error")
    assert err["param"] == "max_tokens"


@pytest.mark.parametrize("content, param", [
    ([{"type": "video", "url": "x"}], "messages[0].content[0].type"),
    ([{"type": "tool_result", "tool_use_id": "toolu_nobody", "content": "x"}],
     "messages[0].content[0].tool_use_id"),
    ([{"type": "image", "source": {"type": "base64", "media_type": "image/tiff",
                                   "data": "AAAA"}}],
     "messages[0].content[0].source.media_type"),
])
def test_bad_content_is_named(gw, helpers, content, param):
    r = post(gw, helpers.KEY, {"model": "claude", "max_tokens": 5,
                               "messages": [{"role": "user", "content": content}]})
    err = assert_anthropic_error(r, 400, "invalid_request_error")
    assert err["param"] == param, err


def test_an_image_larger_than_the_body_limit(gw, helpers):
    """Past the gateway's body limit (1 MB here): 413 in Anthropic's shape. (The 5 MB
    per-image rule of a gateway with a larger limit: tests/lua/test_strict_anthropic.lua.)"""
    r = post(gw, helpers.KEY, {"model": "claude", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": "A" * (2 * 1024 * 1024)}}]}]})
    assert_anthropic_error(r, 413, "request_too_large")


def test_tools_to_a_predict_backend_are_refused(gw, helpers):
    r = post(gw, helpers.KEY, {"model": "kv1", "max_tokens": 5, "tools": TOOLS,
                               "messages": [{"role": "user", "content": "hi"}]})
    err = assert_anthropic_error(r, 400, "invalid_request_error")
    assert err["param"] == "tools"
    # without tools the text reaches it (its predictions as the answer's text)
    r = post(gw, helpers.KEY, {"model": "kv1", "max_tokens": 5,
                               "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["type"] == "text"


def test_count_tokens(client):
    n = client.messages.count_tokens(model="gpt", system="be brief",
                                     messages=[{"role": "user", "content": "hello " * 40}])
    # the gateway's estimate: a token per 4 bytes of what would be sent
    assert 60 <= n.input_tokens <= 80, n


def test_image_reaches_an_openai_backend(client):
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    msg = client.messages.create(model="gpt", max_tokens=20, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        {"type": "text", "text": "what is this"}]}])
    assert msg.content[0].text == "echo: what is this"


@pytest.mark.parametrize("stream", [False, True])
def test_text_backends_of_other_protocols_answer(gateway, helpers, protocol_backends, stream):
    """Triton's generate (frame by frame when streamed) and a vendor mapping."""
    snap = helpers.make_snapshot(1, {
        "v2": (5000, [protocol_backends["kserve_v2"].entry(1)]),
        "va": (5000, [protocol_backends["vendor-a"].entry(2, protocol="vendor",
                                                           mapping="vendor-a")])},
        mappings={"vendor-a": {"path": "/generate", "request": {"text": "{{input}}"},
                               "response": {"output": "/result/text", "error": "/err/msg"}}})
    assert gateway.push(snap).status_code == 200
    client = anthropic.Anthropic(base_url=gateway.url, api_key=helpers.KEY, max_retries=0)
    for model, want in (("v2", "v2: one two"), ("va", "A: one two")):
        kw = dict(model=model, max_tokens=20, messages=[{"role": "user", "content": "one two"}])
        if stream:
            with client.messages.stream(**kw) as s:
                msg = s.get_final_message()
        else:
            msg = client.messages.create(**kw)
        assert msg.content[0].text == want, model
        assert msg.stop_reason == "end_turn"


@pytest.mark.parametrize("model", ["claude", "gpt"])
def test_backend_errors_reach_the_client_as_its_classes(client, model):
    """A backend's own refusals, native or converted, in Anthropic's shape."""
    hi = dict(model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    for status, cls in ((429, anthropic.RateLimitError), (400, anthropic.BadRequestError),
                        (500, anthropic.InternalServerError)):
        with pytest.raises(cls) as exc:
            client.messages.create(extra_headers={"X-Demo-Status": str(status)}, **hi)
        body = exc.value.body
        assert body["type"] == "error" and body["request_id"], body
        assert "injected status" in body["error"]["message"], body
