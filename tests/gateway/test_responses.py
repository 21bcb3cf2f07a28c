"""POST /v1/responses (the OpenAI Responses API) through the real gateway to chat
backends (converted both ways, streams event by event), with the official `openai`
client unchanged: responses.create, responses.stream, function calls round trip."""
from __future__ import annotations

import json
import time

import openai
import pytest
import requests

from waiting import eventually

TOOLS = [{"type": "function", "name": "lookup", "description": "Look something up",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                         "required": ["query"]}},
         {"type": "function", "name": "weather",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]


@pytest.fixture
def responses_gw(gateway, helpers, backends):
    snap = helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "predict-demo": (5000, [backends["predict-a"].entry(2)]),
    })
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    return gateway


@pytest.fixture
def client(responses_gw, helpers):
    return openai.OpenAI(base_url=responses_gw.url + "/v1", api_key=helpers.KEY, max_retries=0)


def post(gw, helpers, body, **kw):
    return requests.post(gw.url + "/v1/responses", json=body, timeout=10,
                         headers={"Authorization": f"Bearer {helpers.KEY}"}, **kw)


def test_create_with_a_string_input(client):
    r = client.responses.create(model="chat-demo", input="hello there",
                                instructions="be brief", max_output_tokens=50,
                                metadata={"team": "a"})
    assert r.status == "completed" and r.object == "response"
    assert r.id.startswith("resp_")
    assert r.output_text == "echo: hello there"
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.metadata == {"team": "a"} and r.max_output_tokens == 50
    # the demo counts words: "be brief" + "hello there" in, "echo: hello there" out
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (4, 3, 7)


def test_create_with_message_items_and_an_image(client):
    r = client.responses.create(model="chat-demo", input=[
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "an answer"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "look at"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}])
    assert r.output_text == "echo: look at"


def test_stream_events_in_the_documented_order(client):
    with client.responses.stream(model="chat-demo", input="one two three") as s:
        types = [e.type for e in s]
        final = s.get_final_response()
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    deltas = types.count("response.output_text.delta")
    assert deltas == 4   # the demo streams a word a chunk: "echo:", "one", "two", "three"
    assert types[4 + deltas:] == ["response.output_text.done", "response.content_part.done",
                                  "response.output_item.done", "response.completed"]
    assert final.output_text == "echo: one two three"
    assert final.usage.output_tokens == 4 and final.usage.input_tokens == 3


def test_stream_sequence_numbers_and_raw_frames(responses_gw, helpers):
    r = post(responses_gw, helpers, {"model": "chat-demo", "input": "hi", "stream": True},
             stream=True)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    events = []
    for block in r.text.strip().split("\n\n"):
        name, data = block.split("\n")
        ev = json.loads(data[len("data: "):])
        assert name == "event: " + ev["type"]
        events.append(ev)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["usage"]["total_tokens"] == 3


def test_function_call_round_trip(client):
    first = client.responses.create(model="chat-demo", input="use a tool paris weather",
                                    tools=TOOLS)
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "lookup"
    assert json.loads(calls[0].arguments) == {"query": "paris weather"}
    second = client.responses.create(model="chat-demo", tools=TOOLS, input=[
        {"role": "user", "content": "use a tool paris weather"},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "lookup",
         "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}])
    assert second.output_text == "tool said: sunny"


def test_streamed_parallel_function_calls(client):
    with client.responses.stream(model="chat-demo", input="use every tool x y",
                                 tools=TOOLS) as s:
        events = list(s)
        final = s.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["lookup", "weather"]
    assert all(json.loads(c.arguments) == {"query": "x y"} for c in calls)
    assert len({c.call_id for c in calls}) == 2
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) == 4   # the demo sends each call's arguments in two pieces
    done = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(a) for a in done] == [{"query": "x y"}] * 2


def test_broken_tool_arguments_from_the_backend_are_an_error_not_a_hang(client):
    with pytest.raises(openai.APIStatusError) as e:   # whole: a 502 in the template
        client.responses.create(model="chat-demo", input="use a broken tool x", tools=TOOLS)
    assert e.value.status_code == 502 and "JSON" in e.value.body["message"]
    with pytest.raises(openai.APIError) as e:   # streamed: an error event ends the stream
        with client.responses.stream(model="chat-demo", input="use a broken tool x",
                                     tools=TOOLS) as s:
            for _ in s:
                pass
    assert "JSON" in str(e.value)


def test_a_predict_model_answers_text_whole_and_streamed(client):
    r = client.responses.create(model="predict-demo", input="a cat")
    assert r.status == "completed" and r.output_text
    with client.responses.stream(model="predict-demo", input="a cat") as s:
        types = [e.type for e in s]
        final = s.get_final_response()
    assert final.output_text == r.output_text
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert types.count("response.output_text.delta") == 1   # the whole answer at once


def test_tools_to_a_predict_model_are_a_400_naming_tools(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="predict-demo", input="use a tool x", tools=TOOLS)
    assert e.value.body["param"] == "tools"


def test_chat_tools_to_a_predict_model_are_a_400_naming_tools(responses_gw, helpers):
    r = requests.post(responses_gw.url + "/v1/chat/completions", timeout=10,
                      headers={"Authorization": f"Bearer {helpers.KEY}"},
                      json={"model": "predict-demo", "tools": [{"type": "function", "function": {
                          "name": "lookup"}}], "messages": [{"role": "user", "content": "x"}]})
    err = helpers.assert_error(r, 400, "invalid_request_error")
    assert err["param"] == "tools" and "predict" in err["message"]


def test_chat_tool_calls_from_a_chat_backend_pass_through(client):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    r = client.chat.completions.create(model="chat-demo", tools=tools,
                                       messages=[{"role": "user", "content": "use a tool x"}])
    assert r.choices[0].message.tool_calls[0].function.name == "lookup"


def test_previous_response_id_on_a_converted_backend_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="chat-demo", input="again",
                                previous_response_id="resp_123")
    assert e.value.body["param"] == "previous_response_id"
    assert "Responses" in e.value.body["message"]


@pytest.mark.parametrize("body, param", [
    ({"model": "chat-demo"}, "input"),
    ({"model": "chat-demo", "input": 3}, "input"),
    ({"model": "chat-demo", "input": [{"type": "bogus"}]}, "input[0].type"),
    ({"model": "chat-demo", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"model": "chat-demo", "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
     "input[0].content[0].text"),
    ({"model": "chat-demo", "input": [{"type": "function_call_output", "call_id": "c1",
                                       "output": "x"}]}, "input[0].call_id"),
    ({"model": "chat-demo", "input": "x", "temperature": 3}, "temperature"),
    ({"model": "chat-demo", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "chat-demo", "input": "x", "tools": [{"type": "function", "name": "a b"}]},
     "tools[0].name"),
    ({"model": "chat-demo", "input": "x", "metadata": {"k": 1}}, "metadata"),
    ({"model": "chat-demo", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
])
def test_bad_bodies_are_400_naming_the_param(responses_gw, helpers, body, param):
    r = post(responses_gw, helpers, body)
    err = helpers.assert_error(r, 400, "invalid_request_error")
    assert err["param"] == param, err


def test_usage_is_counted_once_and_right(gateway, helpers, backends):
    # a model of its own: counters per consumer, model and day carry over on the
    # module's gateway
    key = "sk-test-resp-usage-0123456789abcdef"
    snap = helpers.make_snapshot(1, {"chat-usage": (5000, [backends["openai-a"].entry(1)])})
    helpers.add_planned(snap, key, {"monthly_tokens": 100000})
    assert gateway.push(snap).status_code == 200
    c = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    whole = c.responses.create(model="chat-usage", input="one two three")
    with c.responses.stream(model="chat-usage", input="four five", tools=TOOLS) as s:
        list(s)
        streamed = s.get_final_response()
    with c.responses.stream(model="chat-usage", input="use a tool six", tools=TOOLS) as s:
        list(s)
        called = s.get_final_response()
    want = [3] + [sum(getattr(r.usage, f) for r in (whole, streamed, called))
                  for f in ("input_tokens", "output_tokens", "total_tokens")]
    assert want[1:] == [3 + 2 + 4, 4 + 3 + 2, 7 + 5 + 6]   # the demo counts words
    day = time.strftime("%Y%m%d", time.gmtime())
    want += [0, 0, 0, 0]   # no audio, characters, images, session seconds
    eventually(lambda: gateway.usage()["counters"].get(f"{day}|3|chat-usage") == want,
               message="usage counters")


def test_refusals_are_not_counted_by_limits(gateway, helpers, backends):
    key = "sk-test-resp-limits-0123456789abcdef"
    snap = helpers.make_snapshot(1, {"chat-demo": (5000, [backends["openai-a"].entry(1)]),
                                     "predict-demo": (5000, [backends["predict-a"].entry(2)])})
    helpers.add_planned(snap, key, {"daily_requests": 1}, name="resp-limits")
    assert gateway.push(snap).status_code == 200
    h = {"Authorization": f"Bearer {key}"}
    for body in ({"model": "chat-demo", "input": "x", "temperature": 9},
                 {"model": "chat-demo", "input": "x", "previous_response_id": "resp_1"},
                 {"model": "predict-demo", "input": "x", "tools": [
                     {"type": "function", "name": "lookup"}]}):
        r = requests.post(gateway.url + "/v1/responses", json=body, headers=h, timeout=10)
        assert r.status_code == 400, r.text
    ok = requests.post(gateway.url + "/v1/responses", json={"model": "chat-demo", "input": "x"},
                       headers=h, timeout=10)
    assert ok.status_code == 200, ok.text
    again = requests.post(gateway.url + "/v1/responses", json={"model": "chat-demo",
                                                               "input": "x"}, headers=h, timeout=10)
    helpers.assert_error(again, 429, "rate_limited")
