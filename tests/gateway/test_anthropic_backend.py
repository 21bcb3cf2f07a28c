"""The `anthropic` backend protocol from OpenAI callers (the official `openai` client
unchanged), and tool calls across the pair both ways: OpenAI `tools`/`tool_calls` to
the demo Anthropic backend's `tool_use`, and Anthropic callers' `tool_use` /
`tool_result` to an OpenAI-chat backend (a scripted one here: the demo's own tool
rule is the demo's business), streamed and not; broken tool arguments from a backend
end a stream with an error, and usage is counted once, in Sluice's counters."""
from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import anthropic
import openai
import pytest
import requests
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

from control_plane.runtime import procs

from backend_http import Backend as HttpBackend, served as serve_http
from tool_backend import PIECE, ToolModel

REPO = Path(__file__).resolve().parents[2]
BACKEND_KEY = "sk-ant-backend-abcdef"
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look something up",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}]
A_TOOLS = [{"name": "lookup", "input_schema": TOOLS[0]["function"]["parameters"]}]


@pytest.fixture(scope="module")
def anthropic_backend(tmp_path_factory):
    port = procs.free_port()
    log = tmp_path_factory.mktemp("anthropic-backend") / "backend.log"
    proc = procs.spawn([sys.executable, "-m", "control_plane.demo.backends", "--protocol",
                        "anthropic", "--port", str(port), "--name", "claude-b"], log=log, cwd=REPO)
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
        yield port
    finally:
        procs.stop(proc)


class ScriptedChat(HttpBackend):
    """An OpenAI chat backend that calls the first tool offered when the last message
    is the user's, and answers a tool message with "tool said: <content>"; keeps the
    bodies it got. `X-Test-Bad-Args: yes`: the streamed arguments are no JSON (cut
    short); `malformed`: their second piece breaks the JSON (`{"que` + `ry": x}`)."""

    seen: list = []

    def do_POST(self):
        body = json.loads(self.read_body())
        ScriptedChat.seen.append(body)
        last = body["messages"][-1]
        usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        if last["role"] == "tool":
            msg = {"role": "assistant", "content": "tool said: " + last["content"]}
            finish = "stop"
        else:
            args = {"yes": "{\"query\": \"x\"", "malformed": "{\"query\": x}"}.get(
                self.headers.get("X-Test-Bad-Args"), "{\"query\": \"x\"}")
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {
                    "name": body["tools"][0]["function"]["name"], "arguments": args}}]}
            finish = "tool_calls"
        if not body.get("stream"):
            out = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
                   "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                   "usage": usage}
            return self.answer(200, json.dumps(out).encode())
        chunks = [{"role": "assistant", "content": ""}]
        if msg.get("tool_calls"):
            call = msg["tool_calls"][0]
            a = call["function"]["arguments"]
            chunks.append({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                           "function": {"name": call["function"]["name"],
                                                        "arguments": ""}}]})
            chunks += [{"tool_calls": [{"index": 0, "function": {"arguments": p}}]}
                       for p in (a[:5], a[5:])]
        else:
            chunks.append({"content": msg["content"]})
        events = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in chunks]
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        events.append({"choices": [], "usage": usage})
        out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        self.answer(200, out + b"data: [DONE]\n\n", "text/event-stream")


@pytest.fixture(scope="module")
def scripted():
    with serve_http(ScriptedChat) as port:
        yield port


@pytest.fixture(scope="module")
def split_tools():
    """tool_backend.py: arguments in PIECE-character deltas, parallel calls interleaved."""
    with serve_http(ToolModel) as port:
        yield port


def entry(id, name, protocol, port, **over):
    return {"id": id, "name": name, "protocol": protocol, "scheme": "http",
            "host": "127.0.0.1", "port": port, "host_header": f"localhost:{port}",
            "base_path": "", "weight": 100, **over}


@pytest.fixture
def gw(gateway, helpers, backends, anthropic_backend, scripted, split_tools):
    snap = helpers.make_snapshot(1, {
        "claude": (5000, [entry(1, "claude-b", "anthropic", anthropic_backend,
                                auth_header="Bearer " + BACKEND_KEY)]),
        "claude-usage": (5000, [entry(2, "claude-b", "anthropic", anthropic_backend)]),
        "tools-chat": (5000, [entry(3, "scripted", "openai", scripted)]),
        "kv1": (5000, [backends["predict-a"].entry(4)]),
        "tools-split": (5000, [entry(5, "tools", "openai", split_tools)]),
    })
    snap["models"]["claude"]["max_output_tokens"] = 64
    snap["consumers"]["1"]["plan_id"] = 7      # alice on a plan: usage counted
    snap["plans"] = {"7": {"id": 7, "name": "p"}}
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    return gateway


@pytest.fixture
def oai(gw, helpers):
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=helpers.KEY, max_retries=0)


@pytest.fixture
def claude_client(gw, helpers):
    return anthropic.Anthropic(base_url=gw.url, api_key=helpers.KEY, max_retries=0)


def test_chat_to_an_anthropic_backend(oai):
    raw = oai.chat.completions.with_raw_response.create(
        model="claude", messages=[{"role": "system", "content": "be brief"},
                                  {"role": "user", "content": "hello 世界"}])
    c = raw.parse()
    assert c.choices[0].message.content == "echo: hello 世界"
    assert c.choices[0].finish_reason == "stop"
    assert (c.usage.prompt_tokens, c.usage.completion_tokens) == (4, 3)
    # system lifted out; max_tokens from the model's max_output_tokens; the key as X-API-Key
    assert raw.headers["X-Demo-Saw-System"] == "yes"
    assert raw.headers["X-Demo-Max-Tokens"] == "64"
    assert raw.headers["X-Demo-Anthropic-Version"] == "2023-06-01"
    assert raw.headers["X-Demo-Api-Key-Sha256"] == hashlib.sha256(BACKEND_KEY.encode()).hexdigest()
    assert raw.headers["X-Demo-Saw-Authorization"] == "yes"   # X-API-Key, not Authorization
    assert "X-Demo-Authorization-Sha256" not in raw.headers


def test_stop_reasons_become_finish_reasons(oai):
    c = oai.chat.completions.create(model="claude", max_tokens=2,
                                    messages=[{"role": "user", "content": "a b c d"}])
    assert c.choices[0].finish_reason == "length"
    assert c.choices[0].message.content == "echo: a"


def test_chat_stream_from_an_anthropic_backend(oai):
    stream = oai.chat.completions.create(model="claude", stream=True,
                                         stream_options={"include_usage": True},
                                         messages=[{"role": "user", "content": "one two three"}])
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "echo: one two three"
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"
    assert chunks[-1].usage.prompt_tokens == 3 and chunks[-1].usage.completion_tokens == 4


def test_completions_and_predict_callers_reach_it(gw, oai, helpers):
    c = oai.completions.create(model="claude", prompt="hi there")
    assert c.choices[0].text == "echo: hi there"
    r = requests.post(gw.url + "/v1/predict", headers={"Authorization": f"Bearer {helpers.KEY}"},
                      json={"api_version": "1.0", "model": "claude",
                            "params": {"input": ["ping"]}}, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"] == ["echo: ping"]


@pytest.mark.parametrize("stream", [False, True])
def test_openai_tool_round_trip_to_an_anthropic_backend(oai, stream):
    first = [{"role": "user", "content": "use a tool weather in Paris"}]
    if stream:
        calls = {}
        finish = None
        for ch in oai.chat.completions.create(model="claude", tools=TOOLS, messages=first,
                                              stream=True):
            for d in ch.choices[0].delta.tool_calls or [] if ch.choices else []:
                got = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
                got["id"] = d.id or got["id"]
                got["name"] = (d.function.name if d.function else None) or got["name"]
                got["arguments"] += (d.function.arguments or "") if d.function else ""
            if ch.choices and ch.choices[0].finish_reason:
                finish = ch.choices[0].finish_reason
        assert finish == "tool_calls"
        call = SimpleNamespace(id=calls[0]["id"], name=calls[0]["name"],
                               arguments=calls[0]["arguments"])
    else:
        c = oai.chat.completions.create(model="claude", tools=TOOLS, messages=first)
        assert c.choices[0].finish_reason == "tool_calls"
        tc = c.choices[0].message.tool_calls[0]
        call = SimpleNamespace(id=tc.id, name=tc.function.name, arguments=tc.function.arguments)
    assert call.name == "lookup"
    assert json.loads(call.arguments) == {"query": "weather in Paris"}
    again = oai.chat.completions.create(model="claude", tools=TOOLS, messages=first + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
    assert again.choices[0].message.content == "tool said: sunny"


def test_broken_streamed_tool_arguments_end_the_stream_with_an_error(oai):
    with pytest.raises(openai.APIError) as exc:
        for _ in oai.chat.completions.create(
                model="claude", tools=TOOLS, stream=True,
                extra_headers={"X-Demo-Bad-Tool-Json": "yes"},
                messages=[{"role": "user", "content": "use a tool x"}]):
            pass
    assert "not a JSON object" in str(exc.value)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_round_trip_to_an_openai_backend(claude_client, stream):
    ScriptedChat.seen.clear()
    first = [{"role": "user", "content": "find x"}]
    kw = dict(model="tools-chat", max_tokens=30, tools=A_TOOLS, system="sys",
              tool_choice={"type": "any"})
    if stream:
        with claude_client.messages.stream(messages=first, **kw) as s:
            msg = s.get_final_message()
    else:
        msg = claude_client.messages.create(messages=first, **kw)
    assert msg.stop_reason == "tool_use"
    use = msg.content[-1]
    assert (use.type, use.id, use.name, use.input) == ("tool_use", "call_1", "lookup",
                                                       {"query": "x"})
    sent = ScriptedChat.seen[-1]
    assert sent["messages"][0] == {"role": "system", "content": "sys"}
    assert sent["tools"][0]["function"]["name"] == "lookup"
    assert sent["tool_choice"] == "required"
    assert sent["max_tokens"] == 30
    again = claude_client.messages.create(messages=first + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": [{"type": "text", "text": "42"}]}]}], **kw)
    assert again.content[0].text == "tool said: 42"
    assert again.stop_reason == "end_turn"
    sent = ScriptedChat.seen[-1]
    assert sent["messages"][2]["tool_calls"][0]["id"] == "call_1"
    assert json.loads(sent["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {"query": "x"}
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": "42"}
    assert (again.usage.input_tokens, again.usage.output_tokens) == (7, 3)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_caller_gets_an_error_for_broken_tool_arguments(claude_client, stream):
    kw = dict(model="tools-chat", max_tokens=30, tools=A_TOOLS,
              messages=[{"role": "user", "content": "find x"}],
              extra_headers={"X-Test-Bad-Args": "yes"})
    with pytest.raises(anthropic.APIStatusError) as exc:
        if stream:
            with claude_client.messages.stream(**kw) as s:
                s.get_final_message()
        else:
            claude_client.messages.create(**kw)
    assert "not a JSON object" in str(exc.value)


def sse_events(r: requests.Response) -> list[tuple[str, dict]]:
    """(event name, data) of each SSE event of a whole stream."""
    out = []
    for block in r.text.split("\n\n"):
        name = data = None
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
        if data and data != "[DONE]":
            doc = json.loads(data)
            out.append((name or doc.get("type"), doc))
    return out


def test_a_malformed_argument_piece_never_reaches_an_anthropic_caller(gw, helpers,
                                                                      claude_client):
    """The backend's second argument piece breaks the JSON: the caller has the first
    piece, then the error event, never the malformed piece (the SDK raises the
    gateway's error, not a partial-JSON parse error of its own)."""
    body = {"model": "tools-chat", "max_tokens": 30, "tools": A_TOOLS, "stream": True,
            "messages": [{"role": "user", "content": "find x"}]}
    r = requests.post(gw.url + "/v1/messages", json=body, timeout=10,
                      headers={"x-api-key": helpers.KEY, "X-Test-Bad-Args": "malformed"})
    assert r.status_code == 200
    events = sse_events(r)
    pieces = [d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"
              and d["delta"]["type"] == "input_json_delta"]
    assert pieces == ['{"que']
    assert events[-1][0] == "error", events
    assert "not a JSON object" in events[-1][1]["error"]["message"]
    assert "message_stop" not in [n for n, _ in events]
    with pytest.raises(anthropic.APIStatusError) as exc:
        with claude_client.messages.stream(
                model="tools-chat", max_tokens=30, tools=A_TOOLS,
                messages=[{"role": "user", "content": "find x"}],
                extra_headers={"X-Test-Bad-Args": "malformed"}) as s:
            s.get_final_message()
    assert "not a JSON object" in str(exc.value)


def test_a_malformed_argument_piece_never_reaches_a_responses_caller(gw, helpers):
    body = {"model": "tools-chat", "input": "find x", "stream": True,
            "tools": [{"type": "function", "name": "lookup",
                       "parameters": TOOLS[0]["function"]["parameters"]}]}
    r = requests.post(gw.url + "/v1/responses", json=body, timeout=10,
                      headers={"Authorization": f"Bearer {helpers.KEY}",
                               "X-Test-Bad-Args": "malformed"})
    assert r.status_code == 200
    events = sse_events(r)
    names = [n for n, _ in events]
    assert [d["delta"] for n, d in events
            if n == "response.function_call_arguments.delta"] == ['{"que']
    assert names[-1] == "error" and "response.completed" not in names, names
    assert "not a JSON object" in json.dumps(events[-1][1])


def deltas_by_block(events):
    out = {}
    for e in events:
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta":
            out.setdefault(e.index, []).append(e.delta.partial_json)
    return out


def test_anthropic_caller_gets_tool_arguments_as_they_stream(claude_client):
    """One input_json_delta per backend delta; parallel calls whose deltas interleave:
    the first streams, the held one comes in one delta once the first is complete."""
    lookup = A_TOOLS[0]
    clock = {"name": "clock", "input_schema": lookup["input_schema"]}
    with claude_client.messages.stream(model="tools-split", max_tokens=30, tools=[lookup],
                                       messages=[{"role": "user",
                                                  "content": "use a tool rain in Oslo"}]) as s:
        events = list(s)
        final = s.get_final_message()
    args = json.dumps({"query": "rain in Oslo"})
    [pieces] = deltas_by_block(events).values()
    assert pieces == [args[at:at + PIECE] for at in range(0, len(args), PIECE)], pieces
    assert [b.input for b in final.content] == [{"query": "rain in Oslo"}]
    with claude_client.messages.stream(model="tools-split", max_tokens=30,
                                       tools=[lookup, clock],
                                       messages=[{"role": "user",
                                                  "content": "use tools in Bergen"}]) as s:
        events = list(s)
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in final.content] == [
        ("lookup", {"query": "in Bergen", "n": 0}), ("clock", {"query": "in Bergen", "n": 1})]
    first, second = deltas_by_block(events).values()
    assert len(first) > 2 and all(len(p) <= PIECE for p in first), first
    # held while the first was incomplete: what it had then in one delta, then the rest
    assert len(second[0]) > PIECE and all(len(p) <= PIECE for p in second[1:]), second
    assert json.loads("".join(second)) == {"query": "in Bergen", "n": 1}


def test_usage_is_counted_once(gw, oai, claude_client):
    """Every way to the anthropic backend counts the tokens its answers report, once."""
    day = time.strftime("%Y%m%d", time.gmtime())
    oai.chat.completions.create(model="claude-usage",
                                messages=[{"role": "user", "content": "a b"}])   # 2 + 3
    # (an OpenAI stream reports usage when asked: docs/contracts.md)
    list(oai.chat.completions.create(model="claude-usage", stream=True,
                                     stream_options={"include_usage": True},
                                     messages=[{"role": "user", "content": "a b c"}]))  # 3 + 4
    claude_client.messages.create(model="claude-usage", max_tokens=9,
                                  messages=[{"role": "user", "content": "a"}])   # 1 + 2
    with claude_client.messages.stream(model="claude-usage", max_tokens=9,
                                       messages=[{"role": "user", "content": "a b c d"}]) as s:
        s.get_final_message()                                                    # 4 + 5
    counters = gw.usage()["counters"]
    assert counters[f"{day}|1|claude-usage"] == [4, 10, 14, 24, 0, 0, 0, 0]   # no media, no session


def test_tools_to_a_backend_that_cannot_call_them(oai):
    with pytest.raises(openai.BadRequestError) as exc:
        oai.chat.completions.create(model="kv1", tools=TOOLS,
                                    messages=[{"role": "user", "content": "hi"}])
    assert exc.value.body["param"] == "tools"


def test_an_openai_agents_loop_runs_on_an_anthropic_backend(gw, helpers):
    """The Agents SDK, unchanged: a function tool, two turns, through Sluice's chat
    completions to the Anthropic-protocol demo backend (its tool rule)."""
    set_tracing_disabled(True)   # no trace export: nothing outside this machine
    asked = []

    @function_tool
    def lookup(query: str) -> str:
        """Look something up."""
        asked.append(query)
        return f"found {query}"

    client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=helpers.KEY, max_retries=0)
    agent = Agent(name="helper", instructions="be brief", tools=[lookup],
                  model=OpenAIChatCompletionsModel(model="claude", openai_client=client))
    result = Runner.run_sync(agent, "use a tool weather in Paris")
    assert asked == ["weather in Paris"]
    assert result.final_output == "tool said: found weather in Paris"
