"""The two newest caller APIs across each other's backends, through the real gateway
and the official clients: Responses callers (`openai`) on an `anthropic` backend, and
Anthropic callers (`anthropic`) on an `openai_responses` backend, whole and streamed,
each with a tool call and its result. The tool call crosses as the one internal form
(adapters/chat.lua), so the ids, names and arguments the caller gets are the backend's."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import anthropic
import openai
import pytest
import requests

from control_plane.runtime import procs

REPO = Path(__file__).resolve().parents[2]

RESPONSES_TOOLS = [{"type": "function", "name": "lookup", "description": "Look something up",
                    "parameters": {"type": "object",
                                   "properties": {"query": {"type": "string"}}}}]
ANTHROPIC_TOOLS = [{"name": "lookup", "description": "Look something up",
                    "input_schema": {"type": "object",
                                     "properties": {"query": {"type": "string"}}}}]


def demo_backend(tmp_path_factory, protocol: str, name: str):
    port = procs.free_port()
    log = tmp_path_factory.mktemp(name) / "backend.log"
    proc = procs.spawn([sys.executable, "-m", "control_plane.demo.backends", "--protocol",
                        protocol, "--port", str(port), "--name", name], log=log, cwd=REPO)
    procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
    entry = {"name": name, "protocol": protocol, "scheme": "http", "host": "127.0.0.1",
             "port": port, "host_header": f"localhost:{port}", "base_path": "", "weight": 100}
    return proc, entry


@pytest.fixture(scope="module")
def demo_backends(tmp_path_factory):
    procs_started = []
    try:
        claude_proc, claude = demo_backend(tmp_path_factory, "anthropic", "claude-a")
        procs_started.append(claude_proc)
        resp_proc, resp = demo_backend(tmp_path_factory, "openai_responses", "resp-a")
        procs_started.append(resp_proc)
        yield {"claude": {**claude, "id": 1, "auth_header": "sk-ant-backend-0123456789"},
               "resp": {**resp, "id": 2}}
    finally:
        for p in procs_started:
            procs.stop(p)


@pytest.fixture
def gw(gateway, helpers, demo_backends):
    r = gateway.push(helpers.make_snapshot(1, {"claude": (5000, [demo_backends["claude"]]),
                                               "resp": (5000, [demo_backends["resp"]])}))
    assert r.status_code == 200, r.text
    return gateway


@pytest.fixture
def oai(gw, helpers):
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=helpers.KEY, max_retries=0)


@pytest.fixture
def claude(gw, helpers):
    return anthropic.Anthropic(base_url=gw.url, api_key=helpers.KEY, max_retries=0)


# ---- Responses callers, anthropic backend ---------------------------------------------

def test_responses_caller_tool_call_round_trip_on_an_anthropic_backend(oai):
    first = oai.responses.create(model="claude", input="use a tool rome weather",
                                 tools=RESPONSES_TOOLS)
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "lookup"
    assert calls[0].call_id.startswith("toolu_")   # the backend's own id
    assert json.loads(calls[0].arguments) == {"query": "rome weather"}
    second = oai.responses.create(model="claude", tools=RESPONSES_TOOLS, input=[
        {"role": "user", "content": "use a tool rome weather"},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "lookup",
         "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}])
    assert second.output_text == "tool said: sunny"
    assert second.status == "completed" and second.usage.output_tokens > 0


def test_responses_caller_streams_a_tool_call_from_an_anthropic_backend(oai):
    with oai.responses.stream(model="claude", input="use a tool rome weather",
                              tools=RESPONSES_TOOLS) as s:
        events = list(s)
        final = s.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "lookup"
    assert json.loads(calls[0].arguments) == {"query": "rome weather"}
    # the demo sends the input in two pieces: both reach the caller as deltas
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) == 2 and json.loads("".join(deltas)) == {"query": "rome weather"}
    assert events[-1].type == "response.completed"
    with oai.responses.stream(model="claude", input="one two") as s:
        assert s.get_final_response().output_text == "echo: one two"


# ---- Anthropic callers, openai_responses backend ---------------------------------------

def test_anthropic_caller_tool_call_round_trip_on_a_responses_backend(claude):
    msgs = [{"role": "user", "content": "use a tool rome weather"}]
    first = claude.messages.create(model="resp", max_tokens=100, messages=msgs,
                                   tools=ANTHROPIC_TOOLS)
    assert first.stop_reason == "tool_use"
    uses = [b for b in first.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "lookup"
    assert uses[0].input == {"query": "rome weather"}
    msgs += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                           "content": "sunny"}]}]
    second = claude.messages.create(model="resp", max_tokens=100, messages=msgs,
                                    tools=ANTHROPIC_TOOLS)
    assert second.stop_reason == "end_turn"
    assert [b.text for b in second.content if b.type == "text"] == ["tool said: sunny"]
    assert second.usage.input_tokens > 0 and second.usage.output_tokens > 0


def test_anthropic_caller_streams_a_tool_call_from_a_responses_backend(claude):
    with claude.messages.stream(model="resp", max_tokens=100, tools=ANTHROPIC_TOOLS,
                                messages=[{"role": "user",
                                           "content": "use a tool rome weather"}]) as s:
        events = list(s)
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    uses = [b for b in final.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "lookup"
    assert uses[0].input == {"query": "rome weather"}
    names = [e.type for e in events]
    assert names[0] == "message_start" and "content_block_start" in names
    # the demo streams the arguments in two pieces: one input_json_delta each, as
    # Anthropic streams them
    pieces = [e.delta.partial_json for e in events if e.type == "content_block_delta"
              and e.delta.type == "input_json_delta"]
    assert len(pieces) == 2 and json.loads("".join(pieces)) == {"query": "rome weather"}, pieces
    with claude.messages.stream(model="resp", max_tokens=100,
                                messages=[{"role": "user", "content": "one two"}]) as s:
        text = "".join(s.text_stream)
    assert text == "echo: one two"


def test_what_a_responses_backend_has_no_place_for_is_named(claude):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="resp", max_tokens=10, top_k=5,
                               messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["param"] == "top_k", e.value.body
    # named as the caller knows it, not as the chat form the conversion goes through
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="resp", max_tokens=10, stop_sequences=["END"],
                               messages=[{"role": "user", "content": "hi"}])
    err = e.value.body["error"]
    assert err["param"] == "stop_sequences", e.value.body
    assert err["message"].startswith("stop_sequences cannot be sent"), err


# ---- what a converted message cannot carry, named in the caller's own request --------

FILE = {"type": "input_file", "filename": "a.pdf",
        "file_data": "data:application/pdf;base64,JVBERi0xLjQK"}
LOOKUP = {"type": "function", "name": "lookup",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}


@pytest.mark.parametrize("body, param", [
    # instructions become the chat form's messages[0]: the file part is its messages[2]
    ({"instructions": "be brief", "input": [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "input_text", "text": "read"}, FILE]}]},
     "input[1].content[1].type"),
    # function_call items join one assistant turn (messages[2].tool_calls[1] there)
    ({"instructions": "be brief", "tools": [LOOKUP], "input": [
        {"role": "user", "content": "use a tool x"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": "[1]"},
        {"type": "function_call_output", "call_id": "c1", "output": "a"},
        {"type": "function_call_output", "call_id": "c2", "output": "b"}]},
     "input[2].arguments"),
], ids=["content-part", "function-call"])
def test_a_responses_callers_refused_item_is_named_by_its_own_index(gw, helpers, body, param):
    r = requests.post(gw.url + "/v1/responses", json={"model": "claude", **body},
                      headers={"Authorization": f"Bearer {helpers.KEY}"}, timeout=10)
    err = helpers.assert_error(r, 400, "invalid_request_error")
    assert err["param"] == param, err
