"""sluice_client's stream reading and assembling (pure logic), on the event sequences
Anthropic's and OpenAI's API references document: a stream's events put back together
give the answer a whole call gives; error bodies and events of each shape give the
typed errors. The same code against the real gateway: tests/gateway/test_client_*.py."""
from __future__ import annotations

import io
import json

import pytest
import requests
from sluice_client import (BadRequestError, RateLimitError, ServiceUnavailableError,
                           SluiceError, ToolCall, text_of, tool_calls)
from sluice_client import errors, streams


def sse(frames: list, content_type: str = "text/event-stream") -> requests.Response:
    resp = requests.Response()
    resp.status_code = 200
    resp.headers["Content-Type"] = content_type
    resp.headers["X-Request-Id"] = "req-1"
    resp.raw = io.BytesIO("".join(frames).encode())
    return resp


def frame(event: dict, name: str | None = None) -> str:
    head = f"event: {name or event['type']}\n" if name or "type" in event else ""
    return head + "data: " + json.dumps(event) + "\n\n"


# Anthropic's "streaming with tool use" example, shortened
ANTHROPIC = [
    {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [], "stop_reason": None, "usage": {"input_tokens": 472, "output_tokens": 2}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "text_delta", "text": "Okay, let's check"}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "text_delta", "text": " the weather."}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}},
    {"type": "content_block_delta", "index": 1,
     "delta": {"type": "input_json_delta", "partial_json": ""}},
    {"type": "content_block_delta", "index": 1,
     "delta": {"type": "input_json_delta", "partial_json": "{\"location\":"}},
    {"type": "content_block_delta", "index": 1,
     "delta": {"type": "input_json_delta", "partial_json": " \"San Fra"}},
    {"type": "content_block_delta", "index": 1,
     "delta": {"type": "input_json_delta", "partial_json": "ncisco, CA\"}"}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 89}},
    {"type": "message_stop"},
]

# OpenAI's Responses streaming of a function call, shortened
RESPONSES = [
    {"type": "response.created", "response": {"id": "resp_1", "object": "response",
                                              "status": "in_progress", "output": []}},
    {"type": "response.output_item.added", "output_index": 0, "item": {
        "type": "function_call", "id": "fc_1", "call_id": "call_1",
        "name": "get_weather", "arguments": ""}},
    {"type": "response.function_call_arguments.delta", "output_index": 0,
     "item_id": "fc_1", "delta": "{\"location\":"},
    {"type": "response.function_call_arguments.delta", "output_index": 0,
     "item_id": "fc_1", "delta": " \"Paris\"}"},
    {"type": "response.output_item.added", "output_index": 1, "item": {
        "type": "message", "id": "msg_1", "role": "assistant", "content": []}},
    {"type": "response.content_part.added", "output_index": 1, "content_index": 0,
     "part": {"type": "output_text", "text": ""}},
    {"type": "response.output_text.delta", "output_index": 1, "content_index": 0,
     "delta": "Checking"},
    {"type": "response.output_text.delta", "output_index": 1, "content_index": 0,
     "delta": " now."},
    {"type": "response.completed", "response": {
        "id": "resp_1", "object": "response", "status": "completed", "output": [],
        "usage": {"input_tokens": 10, "output_tokens": 7, "total_tokens": 17}}},
]


def test_anthropic_events_assemble_into_the_message():
    stream = streams.Stream(streams.events(sse([frame(e) for e in ANTHROPIC])),
                            streams.MessageAssembler())
    assert [e["type"] for e in stream][:2] == ["message_start", "content_block_start"]
    message = stream.final()
    assert text_of(message) == "Okay, let's check the weather."
    assert message["stop_reason"] == "tool_use"
    assert message["usage"] == {"input_tokens": 472, "output_tokens": 89}
    assert tool_calls(message) == [
        ToolCall("toolu_1", "get_weather", {"location": "San Francisco, CA"}, "messages")]
    assert tool_calls(message)[0].result("18 °C") == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 °C"}]}


def test_responses_events_assemble_into_the_response():
    # data-only frames, the last one without its blank line
    body = [frame(e) for e in RESPONSES]
    body[-1] = body[-1].rstrip("\n")
    stream = streams.Stream(streams.events(sse(body)), streams.ResponseAssembler())
    response = stream.final()
    assert response["status"] == "completed" and response["usage"]["output_tokens"] == 7
    assert text_of(response) == "Checking now."
    [call] = tool_calls(response)
    assert call == ToolCall("call_1", "get_weather", {"location": "Paris"}, "responses")
    assert call.result({"c": 21}) == {"type": "function_call_output", "call_id": "call_1",
                                      "output": '{"c": 21}'}


def test_chat_chunks_assemble_parallel_calls_and_usage():
    def chunk(delta, finish=None, usage=None):
        return {"id": "c1", "created": 1, "model": "m", "usage": usage,
                "choices": [] if delta is None else
                [{"index": 0, "delta": delta, "finish_reason": finish}]}
    chunks = [chunk({"role": "assistant", "content": None}),
              chunk({"tool_calls": [{"index": 0, "id": "a", "type": "function",
                                     "function": {"name": "f", "arguments": ""}}]}),
              chunk({"tool_calls": [{"index": 1, "id": "b", "type": "function",
                                     "function": {"name": "g", "arguments": "{\"y\""}}]}),
              chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\": 1}"}}]}),
              chunk({"tool_calls": [{"index": 1, "function": {"arguments": ": 2}"}}]}),
              chunk({}, "tool_calls"), chunk(None, usage={"completion_tokens": 4})]
    body = [frame(c) for c in chunks] + ["data: [DONE]\n\n", frame(chunk({"content": "x"}))]
    stream = streams.Stream(streams.events(sse(body)), streams.ChatAssembler())
    whole = stream.final()
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert whole["choices"][0]["message"]["content"] is None
    assert whole["usage"] == {"completion_tokens": 4}
    assert [(c.id, c.name, c.arguments) for c in tool_calls(whole)] == [
        ("a", "f", {"x": 1}), ("b", "g", {"y": 2})]


@pytest.mark.parametrize("event, cls, code, kind", [
    ({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
     ServiceUnavailableError, 503, "overloaded_error"),
    ({"type": "error", "code": "rate_limit_exceeded", "message": "slow down"},
     RateLimitError, 429, "rate_limit_exceeded"),
    ({"type": "response.failed", "response": {"error": {"code": "invalid_prompt",
                                                        "message": "no"}}},
     BadRequestError, 400, "invalid_prompt"),
    ({"error": {"code": 429, "type": "rate_limited", "message": "m", "retry_after": 2}},
     RateLimitError, 429, "rate_limited"),
])
def test_error_events_raise_typed_errors_where_they_arrive(event, cls, code, kind):
    body = [frame(ANTHROPIC[0]), frame(event, "error")]
    stream = streams.events(sse(body))
    assert next(stream)["type"] == "message_start"
    with pytest.raises(cls) as caught:
        next(stream)
    assert (caught.value.code, caught.value.type) == (code, kind)
    assert caught.value.request_id == "req-1"


def test_an_anthropic_error_body_is_typed_with_its_request_id():
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"},
            "request_id": "req_011"}
    err = errors.from_response(429, body, {}, 3.0)
    assert isinstance(err, RateLimitError)
    assert (err.type, err.message, err.request_id, err.retry_after) == (
        "rate_limit_error", "slow", "req_011", 3.0)


def test_a_non_json_event_is_an_error_not_a_hang():
    stream = streams.events(sse(["data: {\"type\": \"x\"\n\n"]))
    with pytest.raises(SluiceError, match="not JSON"):
        next(stream)
