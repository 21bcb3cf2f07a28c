"""Both SDKs on the gateway's Anthropic Messages (`POST /v1/messages`) and Responses
(`POST /v1/responses`) endpoints, converted to the demo OpenAI backend (which calls the
first offered tool on "use a tool <rest>" with {"query": "<rest>"} and answers a tool
result "tool said: <content>"): text, streams, tool round trips, typed errors from
Anthropic-shaped bodies, retries. The JS SDK runs the same in Node and in a browser's
Web Worker. Brief 001's `Model("claude-2")` call reaches the demo's Anthropic-protocol
backend (the same tool rule)."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from browser_worker import chromium, page_server, run_checks
from sluice_client import (APIStatusError, AuthenticationError, BadRequestError, Model,
                           NotFoundError, PermissionDeniedError, RateLimitError,
                           ServiceUnavailableError, Sluice, ToolCall, text_of, tool_calls)

from control_plane.runtime import procs

REPO = Path(__file__).resolve().parents[2]
JS = REPO / "clients" / "js"
PLAN_KEY = "sk-test-sdk-new-apis-0123456789abcdef"   # consumer 3: one request per 2 s
LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "look a thing up",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}
USE = [{"role": "user", "content": "use a tool the weather in Oslo"}]
ASKED = {"query": "the weather in Oslo"}


@pytest.fixture(scope="module")
def claude_port(tmp_path_factory):
    """The demo's Anthropic-protocol backend."""
    port = procs.free_port()
    log = tmp_path_factory.mktemp("claude-backend") / "backend.log"
    proc = procs.spawn([sys.executable, "-m", "control_plane.demo.backends", "--protocol",
                        "anthropic", "--port", str(port), "--name", "claude-a"],
                       log=log, cwd=REPO)
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
        yield port
    finally:
        procs.stop(proc)


def snapshot(helpers, backends, claude_port=None) -> dict:
    models = {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "empty-demo": (5000, []),               # no backend: 503 backend_unavailable
    }
    if claude_port:
        models["claude-2"] = (5000, [{
            "id": 2, "name": "claude-a", "protocol": "anthropic", "scheme": "http",
            "host": "127.0.0.1", "port": claude_port, "host_header": f"localhost:{claude_port}",
            "base_path": "", "weight": 100}])
    snap = helpers.make_snapshot(1, models)
    if claude_port:
        snap["models"]["claude-2"]["max_output_tokens"] = 64
    return helpers.add_planned(snap, PLAN_KEY, {"rate_per_second": 0.5, "burst": 1},
                               plan_name="tiny")


@pytest.fixture
def client(gateway, helpers, backends, claude_port):
    r = gateway.push(snapshot(helpers, backends, claude_port))
    assert r.status_code == 200, r.text
    return Sluice(gateway.url, helpers.KEY)


def test_brief_001s_call_to_a_claude_backend(client, monkeypatch):
    monkeypatch.setenv("SLUICE_BASE_URL", client.base_url)
    monkeypatch.setenv("SLUICE_API_KEY", client.api_key)
    partial = []

    def handle_partial_result(piece):
        partial.append(piece)

    text = Model("claude-2").generate(prompt="解释量子计算 in two words", stream=True,
                                      callback=handle_partial_result)
    assert text == "echo: 解释量子计算 in two words"
    assert len(partial) > 1 and "".join(partial) == text


def test_messages_tools_to_a_claude_backend(client):
    model = client.model("claude-2")
    stream = model.messages(USE, max_tokens=64, tools=[LOOKUP], stream=True)
    pieces = [e["delta"]["partial_json"] for e in stream
              if e["type"] == "content_block_delta"
              and e["delta"]["type"] == "input_json_delta"]
    assert len(pieces) >= 2, pieces            # the input came in pieces
    answer = stream.final()
    [call] = tool_calls(answer)
    assert (call.name, call.arguments) == ("lookup", ASKED)
    turn = USE + [{"role": "assistant", "content": answer["content"]}, call.result("dry")]
    assert text_of(model.messages(turn, max_tokens=64, tools=[LOOKUP])) == "tool said: dry"
    # chat tools to the same backend, streamed: the arguments assembled the same way
    [chat_call] = tool_calls(model.chat(USE, tools=[LOOKUP], stream=True).final())
    assert (chat_call.name, chat_call.arguments, chat_call.api) == ("lookup", ASKED, "chat")


def test_broken_streamed_tool_arguments_raise_not_hang(client):
    broken = Sluice(client.base_url, client.api_key, max_retries=0,
                    headers={"X-Demo-Bad-Tool-Json": "yes"}).model("claude-2")
    started = time.monotonic()
    with pytest.raises(APIStatusError):
        broken.chat(USE, tools=[LOOKUP], stream=True).final()
    assert time.monotonic() - started < 5


def without_pings(events) -> list:
    return [e["type"] for e in events if e["type"] != "ping"]


def test_messages_send_anthropic_version(client):
    """As Anthropic's own SDK does; a version in the client's headers wins. Read off
    what went on the wire (a response hook on the client's own session)."""
    sent = []

    def watching(**kw) -> Sluice:
        session = requests.Session()
        session.hooks["response"].append(lambda r, *a, **k: sent.append(r.request.headers))
        return Sluice(client.base_url, client.api_key, session=session, **kw)

    hi = [{"role": "user", "content": "hi"}]
    watching().model("chat-demo").messages(hi, max_tokens=16)
    watching().model("chat-demo").messages(hi, max_tokens=16, stream=True).final()
    watching(headers={"Anthropic-Version": "2024-01-01"}).model("chat-demo").messages(
        hi, max_tokens=16)
    watching().model("chat-demo").chat(hi)
    assert [h.get("anthropic-version") for h in sent] == \
        ["2023-06-01", "2023-06-01", "2024-01-01", None]


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


def test_js_sdk_in_node(gateway, helpers, backends, claude_port):
    node = shutil.which("node")
    assert node, "node is missing: scripts/setup.sh installs the nodejs package"
    assert gateway.push(snapshot(helpers, backends, claude_port)).status_code == 200
    env = {**os.environ, "SLUICE_BASE_URL": gateway.url, "SLUICE_API_KEY": helpers.KEY}
    done = subprocess.run([node, "--test", "test/new_apis.integration.js"], cwd=JS,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def gateway(shared_gateways):
    """The module's gateway; pages of any origin may call it (SLUICE_CORS_ORIGINS=*):
    the Web Worker's page is served from another origin than the gateway's."""
    return shared_gateways(cors_origins=("*",))


def test_js_sdk_in_a_web_worker(gateway, helpers, backends, claude_port):
    # messages to claude-2 (the Anthropic-protocol backend), responses to chat-demo
    assert gateway.push(snapshot(helpers, backends, claude_port)).status_code == 200
    with page_server() as page, chromium() as driver:
        seen = run_checks(driver, page, gateway.url, helpers.KEY, ["messages", "responses"])
    for api in ("messages", "responses"):
        assert seen[api]["calls"] == [["lookup", {"query": "in a worker"}]], seen
        assert seen[api]["text"] == "echo: hello worker", seen
    assert seen["messages"]["types"][0] == "message_start"
    assert seen["responses"]["types"][-1] == "response.completed"
