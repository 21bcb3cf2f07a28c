"""The demo ``openai`` backend's ``POST /v1/chat/completions``, plain and SSE streaming.

The answer echoes the last user message as ``"echo: <text>"``. Offered ``tools``, a
last user message that begins with ``use a tool`` calls the first one with arguments
``{"query": "<rest of the message>"}`` (``use every tool``: each offered tool, as
parallel calls; ``use a broken tool``: the first, with arguments that are no JSON, for
tests of what a gateway does with them), and a last ``tool`` message is answered
``"tool said: <its content>"``. Token counts in
``usage`` are whitespace-separated words: ``prompt_tokens`` over the content of every
message, ``completion_tokens`` over the answer. Stream chunks are one word each (with
its trailing whitespace), so the deltas concatenate to the full answer;
``stream_options.include_usage`` adds a last chunk with ``usage`` and no choices.
Streams that run to ``[DONE]`` and streams whose reader went away count in the
server's ``streams`` (shown by ``GET /health``).

Handlers take the ``DemoHandler`` (``backends.py``) as their first argument, like those
of ``protocols.py``.
"""
from __future__ import annotations

import json
import re
import time
import uuid

from control_plane.demo.protocols import BadRequest

WORD = re.compile(r"\S+\s*")


def chat_completions(handler, body) -> None:
    """Answer a chat completion request, as one JSON body or as an SSE stream."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or \
            not all(isinstance(m, dict) for m in messages):
        raise BadRequest("'messages' must be a non-empty list of objects")
    model = body.get("model", handler.server.name)
    if not isinstance(model, str):
        raise BadRequest("'model' must be a string")
    user = [m for m in messages if m.get("role") == "user"]
    answer = "echo: " + (_text(user[-1].get("content")) if user else "")
    calls = _tool_calls(body.get("tools"), messages[-1])
    if messages[-1].get("role") == "tool":
        answer = "tool said: " + _text(messages[-1].get("content"))
    prompt_tokens = sum(len(_text(m.get("content")).split()) for m in messages)
    completion_tokens = len(answer.split())
    if calls:
        answer = ""
        completion_tokens = sum(len(c["function"]["arguments"].split()) for c in calls)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
             "total_tokens": prompt_tokens + completion_tokens}
    ident = "chatcmpl-" + uuid.uuid4().hex[:24]
    created = int(time.time())
    if body.get("stream") is True:
        options = body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        _stream_chat(handler, ident, created, model, answer, usage, include_usage, calls)
        return
    message = {"role": "assistant", "content": answer or None}
    if calls:
        message["tool_calls"] = calls
    handler._send_json(200, {
        "id": ident, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": usage,
    })


def _tool_calls(tools, last) -> list[dict]:
    """The calls a last user message starting with "use a tool" (the first tool) or
    "use every tool" (each) makes of the offered `tools`."""
    if not isinstance(tools, list) or not tools or last.get("role") != "user":
        return []
    text = _text(last.get("content"))
    names = [t["function"]["name"] for t in tools if isinstance(t, dict)
             and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)]
    for prefix, chosen in (("use every tool", names), ("use a tool", names[:1]),
                           ("use a broken tool", names[:1])):
        if text.startswith(prefix):
            args = json.dumps({"query": text[len(prefix):].strip()})
            if prefix == "use a broken tool":
                args = args[:-2]   # cut short: not JSON
            return [{"id": "call_" + uuid.uuid4().hex[:20], "type": "function",
                     "function": {"name": name, "arguments": args}} for name in chosen]
    return []


def _stream_chat(handler, ident, created, model, answer, usage, include_usage,
                 calls=()) -> None:
    delay = handler._header_number("X-Demo-Chunk-Delay-Ms", handler.server.chunk_delay_ms)
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Transfer-Encoding", "chunked")
    handler._demo_headers()
    handler.end_headers()

    def chunk(delta, finish_reason=None, choices=True, chunk_usage=None):
        obj = {"id": ident, "object": "chat.completion.chunk", "created": created,
               "model": model,
               "choices": [{"index": 0, "delta": delta, "logprobs": None,
                            "finish_reason": finish_reason}] if choices else []}
        if include_usage:
            obj["usage"] = chunk_usage
        return obj

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": word}) for word in WORD.findall(answer)]
    for i, call in enumerate(calls):   # each call's name first, then its arguments in pieces
        args = call["function"]["arguments"]
        events.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                             "function": {"name": call["function"]["name"],
                                                          "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                   for piece in (args[:len(args) // 2], args[len(args) // 2:])]
    events.append(chunk({}, finish_reason="tool_calls" if calls else "stop"))
    if include_usage:
        events.append(chunk(None, choices=False, chunk_usage=usage))
    try:
        for i, event in enumerate(events):
            if i and delay:
                time.sleep(delay / 1000.0)
            handler._write_chunk(b"data: " + json.dumps(event, ensure_ascii=False)
                                 .encode("utf-8") + b"\n\n")
        handler._write_chunk(b"data: [DONE]\n\n")
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        handler.server.streams["aborted"] += 1
        handler.close_connection = True
        return
    handler.server.streams["completed"] += 1


def _text(content) -> str:
    """The text of a message's content: a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""
