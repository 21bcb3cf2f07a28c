"""Both SDKs on the gateway's Anthropic Messages (`POST /v1/messages`) and Responses
(`POST /v1/responses`) endpoints, converted to the demo OpenAI backend (which calls the
first offered tool on "use a tool <rest>" with {"query": "<rest>"} and answers a tool
result "tool said: <content>"): text, streams, tool round trips, typed errors from
Anthropic-shaped bodies, retries. The JS SDK runs the same in Node and in a browser's
Web Worker."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from browser_worker import chromium, page_server, run_checks
from sluice_client import (AuthenticationError, BadRequestError, NotFoundError,
                           PermissionDeniedError, RateLimitError, ServiceUnavailableError,
                           Sluice, ToolCall, text_of, tool_calls)

JS = Path(__file__).resolve().parents[2] / "clients" / "js"
PLAN_KEY = "sk-test-sdk-new-apis-0123456789abcdef"   # consumer 3: one request per 2 s
LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "look a thing up",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}
USE = [{"role": "user", "content": "use a tool the weather in Oslo"}]
ASKED = {"query": "the weather in Oslo"}


def snapshot(helpers, backends) -> dict:
    snap = helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "empty-demo": (5000, []),               # no backend: 503 backend_unavailable
    })
    return helpers.add_planned(snap, PLAN_KEY, {"rate_per_second": 0.5, "burst": 1},
                               plan_name="tiny")


@pytest.fixture
def client(gateway, helpers, backends):
    r = gateway.push(snapshot(helpers, backends))
    assert r.status_code == 200, r.text
    return Sluice(gateway.url, helpers.KEY)


def without_pings(events) -> list:
    return [e["type"] for e in events if e["type"] != "ping"]


def test_messages_text_whole_and_streamed(client):
    model = client.model("chat-demo")
    answer = model.messages([{"role": "user", "content": "hello there"}], max_tokens=64,
                            system="be brief")
    assert answer["type"] == "message" and answer["role"] == "assistant"
    assert text_of(answer) == "echo: hello there"
    assert answer["stop_reason"] == "end_turn" and answer["usage"]["output_tokens"] == 3
    stream = model.messages([{"role": "user", "content": "one two three"}], max_tokens=64,
                            stream=True)
    events = list(stream)
    types = without_pings(events)
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert types.count("content_block_delta") > 1, types
    whole = stream.final()
    assert text_of(whole) == "echo: one two three" and whole["stop_reason"] == "end_turn"
    seen = []
    again = model.messages([{"role": "user", "content": "one two three"}], max_tokens=64,
                           callback=seen.append)
    assert text_of(again) == "echo: one two three" and len(seen) == len(events)


def test_messages_tool_round_trip(client):
    model = client.model("chat-demo")
    answer = model.messages(USE, max_tokens=64, tools=[LOOKUP])   # sent as input_schema
    assert answer["stop_reason"] == "tool_use"
    [call] = tool_calls(answer)
    assert (call.name, call.arguments, call.api) == ("lookup", ASKED, "messages")
    turn = USE + [{"role": "assistant", "content": answer["content"]}, call.result("rain")]
    assert text_of(model.messages(turn, max_tokens=64, tools=[LOOKUP])) == "tool said: rain"
    stream = model.messages(USE, max_tokens=64, tools=[LOOKUP], stream=True)
    deltas = [e for e in stream if e["type"] == "content_block_delta"]
    assert any(e["delta"]["type"] == "input_json_delta" for e in deltas), deltas
    [streamed] = tool_calls(stream.final())
    assert (streamed.name, streamed.arguments) == ("lookup", ASKED)


def test_responses_text_whole_and_streamed(client):
    model = client.model("chat-demo")
    answer = model.responses("hello there", instructions="be brief")
    assert answer["object"] == "response" and answer["status"] == "completed"
    assert text_of(answer) == "echo: hello there"
    assert answer["usage"]["output_tokens"] == 3
    stream = model.responses("one two three", stream=True)
    types = [e["type"] for e in stream]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert types.count("response.output_text.delta") > 1, types
    assert "response.output_item.added" in types
    whole = stream.final()
    assert text_of(whole) == "echo: one two three"
    assert whole["usage"]["output_tokens"] == 4      # "echo: one two three"


def test_responses_tool_round_trip(client):
    model = client.model("chat-demo")
    clock = {"name": "lookup", "input_schema": LOOKUP["function"]["parameters"]}
    answer = model.responses(USE[0]["content"], tools=[clock])   # sent as Responses' shape
    [call] = tool_calls(answer)
    assert (call.name, call.arguments, call.api) == ("lookup", ASKED, "responses")
    turn = USE + answer["output"] + [call.result({"sky": "grey"})]
    assert text_of(model.responses(turn, tools=[clock])) == 'tool said: {"sky": "grey"}'
    stream = model.responses(USE, tools=[LOOKUP], stream=True)
    types = [e["type"] for e in stream]
    assert "response.function_call_arguments.delta" in types, types
    [streamed] = tool_calls(stream.final())
    assert streamed == ToolCall(streamed.id, "lookup", ASKED, "responses") and streamed.id


def test_anthropic_shaped_errors_are_typed(client, gateway):
    with pytest.raises(NotFoundError) as caught:
        client.model("no-such-model").messages(USE, max_tokens=64)
    err = caught.value
    assert err.code == 404 and err.body["type"] == "error"
    assert err.type == err.body["error"]["type"] and err.request_id
    assert "no-such-model" in err.message
    with pytest.raises((AuthenticationError, PermissionDeniedError)):
        Sluice(gateway.url, "sk-wrong-key-0123456789").model("chat-demo").messages(
            USE, max_tokens=64)
    with pytest.raises(BadRequestError) as caught:   # max_tokens is required
        client.request("POST", "/v1/messages", {"model": "chat-demo", "messages": USE})
    assert "max_tokens" in caught.value.message
    with pytest.raises(BadRequestError) as caught:   # not carried to a converted backend
        client.model("chat-demo").responses("hi", previous_response_id="resp_123")
    assert "previous_response_id" in caught.value.message


def test_new_apis_retry_503(client, caplog):
    caplog.set_level(logging.WARNING, logger="sluice_client")
    impatient = Sluice(client.base_url, client.api_key, max_retries=2, backoff=0.05)
    with pytest.raises(ServiceUnavailableError):
        impatient.model("empty-demo").messages(USE, max_tokens=64)
    with pytest.raises(ServiceUnavailableError):
        impatient.model("empty-demo").responses("hi", stream=True)
    retried = [r for r in caplog.records
               if r.name == "sluice_client" and "retry" in r.getMessage()]
    assert len(retried) == 4, [r.getMessage() for r in retried]


def test_new_apis_retry_429_after_retry_after(gateway_factory, helpers, backends):
    gw = gateway_factory()
    assert gw.push(snapshot(helpers, backends)).status_code == 200
    impatient = Sluice(gw.url, PLAN_KEY, max_retries=0).model("chat-demo")
    assert text_of(impatient.messages([{"role": "user", "content": "a"}],
                                      max_tokens=8)) == "echo: a"
    with pytest.raises(RateLimitError) as caught:
        impatient.responses("b")
    assert 1 <= caught.value.retry_after <= 2
    started = time.monotonic()
    patient = Sluice(gw.url, PLAN_KEY).model("chat-demo")
    assert text_of(patient.messages([{"role": "user", "content": "c"}],
                                    max_tokens=8)) == "echo: c"
    assert time.monotonic() - started >= 1.0


def test_js_sdk_in_node(gateway, helpers, backends, dead_port):
    node = shutil.which("node")
    assert node, "node is missing: scripts/setup.sh installs the nodejs package"
    assert gateway.push(snapshot(helpers, backends)).status_code == 200
    env = {**os.environ, "SLUICE_BASE_URL": gateway.url, "SLUICE_API_KEY": helpers.KEY}
    done = subprocess.run([node, "--test", "test/new_apis.integration.js"], cwd=JS,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_js_sdk_in_a_web_worker(gateway, helpers, backends):
    assert gateway.push(snapshot(helpers, backends)).status_code == 200
    with page_server() as page, chromium() as driver:
        seen = run_checks(driver, page, gateway.url, helpers.KEY, ["messages", "responses"])
    for api in ("messages", "responses"):
        assert seen[api]["calls"] == [["lookup", {"query": "in a worker"}]], seen
        assert seen[api]["text"] == "echo: hello worker", seen
    assert seen["messages"]["types"][0] == "message_start"
    assert seen["responses"]["types"][-1] == "response.completed"
