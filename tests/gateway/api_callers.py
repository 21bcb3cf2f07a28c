"""The three caller APIs as the official clients call them, each reduced to one
`Answer`: what the caller got (text, tool calls, finish), every usage report it got
(a whole answer has one; a stream may carry several, which is what the matrix test
looks for) and the request id the gateway answered with. A plain module shared by
the gateway tests (importing conftest is fragile).

Each caller takes a `Turn`: the user's text, and, for the second turn of a tool
round trip, the tool call the first turn made and the result the caller sends back,
written in the caller's own API (chat `tool` messages, Responses
`function_call_output` items, Anthropic `tool_result` blocks)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import anthropic
import openai

TOOL = {"name": "lookup", "description": "Look something up",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                       "required": ["query"]}}
CHAT_TOOLS = [{"type": "function", "function": TOOL}]
RESPONSES_TOOLS = [{"type": "function", **TOOL}]
ANTHROPIC_TOOLS = [{"name": TOOL["name"], "description": TOOL["description"],
                    "input_schema": TOOL["parameters"]}]
MAX_TOKENS = 100   # Anthropic callers must name one


@dataclass
class Call:
    id: str
    name: str
    arguments: dict


@dataclass
class Turn:
    text: str                      # the user's message
    tools: bool = False            # offer the tool
    call: Call | None = None       # the tool call the previous turn made
    result: str | None = None      # what the caller's tool said


@dataclass
class Answer:
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    finish: str | None = None      # in the caller's words
    usages: list[tuple[int, int]] = field(default_factory=list)  # (prompt, completion)
    request_id: str | None = None


def _call(id_: str, name: str, arguments: str) -> Call:
    return Call(id_, name, json.loads(arguments))


# ---- OpenAI chat -----------------------------------------------------------------

def _chat_messages(turn: Turn) -> list[dict]:
    messages = [{"role": "user", "content": turn.text}]
    if turn.call:
        messages += [{"role": "assistant", "content": None, "tool_calls": [{
                         "id": turn.call.id, "type": "function",
                         "function": {"name": turn.call.name,
                                      "arguments": json.dumps(turn.call.arguments)}}]},
                     {"role": "tool", "tool_call_id": turn.call.id, "content": turn.result}]
    return messages


def chat(client: openai.OpenAI, model: str, turn: Turn, stream: bool, rid: str) -> Answer:
    kw = {"model": model, "messages": _chat_messages(turn),
          "extra_headers": {"X-Request-Id": rid}}
    if turn.tools:
        kw["tools"] = CHAT_TOOLS
    if not stream:
        raw = client.chat.completions.with_raw_response.create(**kw)
        out = raw.parse()
        msg = out.choices[0].message
        return Answer(msg.content or "",
                      [_call(c.id, c.function.name, c.function.arguments)
                       for c in msg.tool_calls or []],
                      out.choices[0].finish_reason,
                      [(out.usage.prompt_tokens, out.usage.completion_tokens)],
                      raw.headers.get("X-Request-Id"))
    chunks = client.chat.completions.create(stream=True,
                                            stream_options={"include_usage": True}, **kw)
    got = Answer(request_id=chunks.response.headers.get("X-Request-Id"))
    calls: dict[int, list] = {}
    for chunk in chunks:
        if chunk.usage is not None:
            got.usages.append((chunk.usage.prompt_tokens, chunk.usage.completion_tokens))
            assert chunk.usage.total_tokens == sum(got.usages[-1])
        for choice in chunk.choices:
            got.text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                c = calls.setdefault(tc.index, ["", "", ""])
                c[0] = tc.id or c[0]
                c[1] = (tc.function.name if tc.function else None) or c[1]
                c[2] += (tc.function.arguments if tc.function else None) or ""
            got.finish = choice.finish_reason or got.finish
    got.calls = [_call(*calls[i]) for i in sorted(calls)]
    return got


# ---- OpenAI Responses ------------------------------------------------------------

def _responses_input(turn: Turn) -> str | list:
    if not turn.call:
        return turn.text
    return [{"role": "user", "content": turn.text},
            {"type": "function_call", "call_id": turn.call.id, "name": turn.call.name,
             "arguments": json.dumps(turn.call.arguments)},
            {"type": "function_call_output", "call_id": turn.call.id,
             "output": turn.result}]


def _from_response(resp, got: Answer) -> Answer:
    got.calls = [_call(o.call_id, o.name, o.arguments) for o in resp.output
                 if o.type == "function_call"]
    got.finish = resp.status
    return got


def responses(client: openai.OpenAI, model: str, turn: Turn, stream: bool,
              rid: str) -> Answer:
    kw = {"model": model, "input": _responses_input(turn),
          "extra_headers": {"X-Request-Id": rid}}
    if turn.tools:
        kw["tools"] = RESPONSES_TOOLS
    if not stream:
        raw = client.responses.with_raw_response.create(**kw)
        out = raw.parse()
        assert out.usage.total_tokens == out.usage.input_tokens + out.usage.output_tokens
        return _from_response(out, Answer(
            out.output_text, usages=[(out.usage.input_tokens, out.usage.output_tokens)],
            request_id=raw.headers.get("X-Request-Id")))
    events = client.responses.create(stream=True, **kw)
    got = Answer(request_id=events.response.headers.get("X-Request-Id"))
    final, args = None, {}
    for ev in events:
        usage = getattr(getattr(ev, "response", None), "usage", None)
        if usage is not None:
            got.usages.append((usage.input_tokens, usage.output_tokens))
        if ev.type == "response.output_text.delta":
            got.text += ev.delta
        elif ev.type == "response.function_call_arguments.delta":
            args[ev.item_id] = args.get(ev.item_id, "") + ev.delta
        elif ev.type == "response.completed":
            final = ev.response
    assert final is not None, "no response.completed"
    assert final.output_text == got.text   # the deltas add up to the answer
    _from_response(final, got)
    # the argument deltas add up to each call's arguments
    assert sorted(json.loads(a) for a in args.values()) == \
        sorted(c.arguments for c in got.calls)
    return got


# ---- Anthropic Messages ----------------------------------------------------------

def _anthropic_messages(turn: Turn) -> list[dict]:
    messages = [{"role": "user", "content": turn.text}]
    if turn.call:
        messages += [{"role": "assistant", "content": [{
                         "type": "tool_use", "id": turn.call.id, "name": turn.call.name,
                         "input": turn.call.arguments}]},
                     {"role": "user", "content": [{
                         "type": "tool_result", "tool_use_id": turn.call.id,
                         "content": turn.result}]}]
    return messages


def _from_message(msg, got: Answer) -> Answer:
    got.text = "".join(b.text for b in msg.content if b.type == "text")
    got.calls = [Call(b.id, b.name, b.input) for b in msg.content if b.type == "tool_use"]
    got.finish = msg.stop_reason
    return got


def messages(client: anthropic.Anthropic, model: str, turn: Turn, stream: bool,
             rid: str) -> Answer:
    kw = {"model": model, "max_tokens": MAX_TOKENS, "messages": _anthropic_messages(turn),
          "extra_headers": {"X-Request-Id": rid}}
    if turn.tools:
        kw["tools"] = ANTHROPIC_TOOLS
    if not stream:
        raw = client.messages.with_raw_response.create(**kw)
        msg = raw.parse()
        return _from_message(msg, Answer(
            usages=[(msg.usage.input_tokens, msg.usage.output_tokens)],
            request_id=raw.headers.get("X-Request-Id")))
    with client.messages.stream(**kw) as s:
        events = list(s)
        final = s.get_final_message()
        got = Answer(request_id=s.response.headers.get("X-Request-Id"))
    # Anthropic's stream: input tokens in message_start, the final counts in one
    # message_delta (output_tokens; input_tokens too when the sender knows them only at
    # the end, as a converted stream does: the SDK takes them as totals, not to add)
    starts = [e for e in events if e.type == "message_start"]
    deltas = [e.usage for e in events if e.type == "message_delta"]
    assert len(starts) == 1 and len(deltas) == 1, [e.type for e in events]
    got.usages = [(final.usage.input_tokens, d.output_tokens) for d in deltas]
    streamed = "".join(e.delta.text for e in events if e.type == "content_block_delta"
                       and e.delta.type == "text_delta")
    _from_message(final, got)
    assert streamed == got.text
    return got


CALLERS = {"chat": chat, "responses": responses, "messages": messages}
