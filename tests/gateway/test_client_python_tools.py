"""The Python SDK's tool calls through the gateway's chat endpoint to an OpenAI-protocol
backend whose model calls tools (tool_backend.py): tools in (in any API's shape), calls
out, streamed argument pieces put back together, results sent back."""
from __future__ import annotations

import json

import pytest
from backend_http import entry
from backend_http import served as serve_http
from sluice_client import BadRequestError, Sluice, Stream, ToolCall, text_of, tool_calls
from tool_backend import ToolModel

LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "look a thing up",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}
# the same kind of tool in Anthropic's shape: the SDK sends it in chat's
CLOCK = {"name": "clock", "description": "the time somewhere",
         "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}


@pytest.fixture(scope="module")
def tool_port():
    with serve_http(ToolModel) as port:
        yield port


@pytest.fixture
def model(gateway, helpers, tool_port):
    snap = helpers.make_snapshot(1, {
        "tools-demo": (5000, [entry(1, "tools", "openai", tool_port)])})
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    return Sluice(gateway.url, helpers.KEY).model("tools-demo")


def test_a_tool_call_and_its_result(model):
    question = [{"role": "user", "content": "use a tool the weather in Oslo"}]
    answer = model.chat(question, tools=[LOOKUP])
    assert answer["choices"][0]["finish_reason"] == "tool_calls"
    calls = tool_calls(answer)
    assert calls == [ToolCall("call_0", "lookup", {"query": "the weather in Oslo"}, "chat")]
    turn = question + [answer["choices"][0]["message"], calls[0].result("rain, 12 °C")]
    follow = model.chat(turn, tools=[LOOKUP])
    assert text_of(follow) == "tool said: rain, 12 °C"
    assert tool_calls(follow) == []


def test_tools_in_anthropic_shape_are_sent_in_chat_shape(model):
    answer = model.chat([{"role": "user", "content": "use tools now"}],
                        tools=[LOOKUP, CLOCK])
    calls = tool_calls(answer)
    assert [(c.name, c.arguments) for c in calls] == [
        ("lookup", {"query": "now", "n": 0}), ("clock", {"query": "now", "n": 1})]


def test_streamed_parallel_calls_are_assembled(model):
    stream = model.chat([{"role": "user", "content": "use tools Oslo and Bergen"}],
                        tools=[LOOKUP, CLOCK], stream=True)
    assert isinstance(stream, Stream)
    chunks = list(stream)
    pieces = [tc["function"]["arguments"] for c in chunks
              for tc in c["choices"][0]["delta"].get("tool_calls") or ()
              if tc["function"].get("arguments")]
    # the arguments came in pieces, the two calls' interleaved
    assert len(pieces) > 6 and all(len(p) <= 4 for p in pieces), pieces
    whole = stream.final()
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    calls = tool_calls(whole)
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_0", "lookup", {"query": "Oslo and Bergen", "n": 0}),
        ("call_1", "clock", {"query": "Oslo and Bergen", "n": 1})]
    # both results back in one turn: the model reads them in order
    turn = [{"role": "user", "content": "use tools Oslo and Bergen"},
            whole["choices"][0]["message"], calls[0].result("wet"),
            calls[1].result({"hour": 9})]
    assert model.chat(turn, tools=[LOOKUP, CLOCK], stream=True).final()[
        "choices"][0]["message"]["content"] == 'tool said: wet; {"hour": 9}'


def test_final_after_a_callback_and_text_streams(model):
    seen = []
    chunks = model.chat([{"role": "user", "content": "plain words here"}],
                        callback=seen.append)
    assert chunks == seen and len(seen) > 2
    pieces = []
    text = model.generate(prompt="more plain words", stream=True, callback=pieces.append)
    assert text == "echo: more plain words" and len(pieces) > 1


def test_a_bad_tool_is_refused_with_its_param(model):
    bad = {"type": "function", "function": {"name": "no spaces allowed", "parameters": {}}}
    with pytest.raises(BadRequestError) as caught:
        model.chat([{"role": "user", "content": "use a tool x"}], tools=[bad])
    assert caught.value.code == 400
    assert "tools[0].function.name" in json.dumps(caught.value.body)
