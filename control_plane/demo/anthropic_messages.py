"""The demo ``anthropic`` backend: Anthropic's Messages API, ``POST /v1/messages``,
plain and SSE streaming, with its own error shape.

What it answers to the last user turn:

- a turn with ``tool_result`` blocks: ``"tool said: <their text>"``;
- a turn whose text begins with ``use a tool`` when the request offers tools: a
  ``tool_use`` of the first tool with input ``{"query": "<rest of the text>"}``
  (``stop_reason`` ``tool_use``);
- anything else: ``"echo: <text>"``.

``max_tokens`` is required (400 without it, as Anthropic answers); an answer longer
than ``max_tokens`` words stops there (``stop_reason`` ``max_tokens``), one that
reaches a ``stop_sequences`` entry stops before it (``stop_sequence``). Token counts are
whitespace-separated words: ``input_tokens`` over the system prompt and every text
and tool result, ``output_tokens`` over the answer (a tool call's input as JSON).

Streams send Anthropic's events in its order: ``message_start``, per block
``content_block_start`` / ``content_block_delta`` (``text_delta`` one word each,
``input_json_delta`` in two pieces) / ``content_block_stop``, ``message_delta`` with
``stop_reason`` and ``usage``, ``message_stop``.

Test hooks (request headers): ``X-Demo-Bad-Tool-Json: yes`` makes a tool call's
streamed arguments invalid JSON. Every answer says what arrived:
``X-Demo-Api-Key-Sha256`` (sha256 of ``X-API-Key``), ``X-Demo-Anthropic-Version``,
``X-Demo-Max-Tokens`` and ``X-Demo-Saw-System`` (``yes``/``no``).
"""
from __future__ import annotations

import hashlib
import json
import re
import time
import uuid

from control_plane.demo.protocols import BadRequest

PATH = "/v1/messages"
USE_A_TOOL = "use a tool"
WORD = re.compile(r"\S+\s*")

# status -> Anthropic's error type
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 529: "overloaded_error"}


def error_body(status: int, message: str) -> dict:
    """An error in Anthropic's shape."""
    return {"type": "error", "error": {
        "type": ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error"),
        "message": message}}


def _text(content) -> str:
    """The text of Anthropic content: a string or blocks (text and tool results)."""
    if isinstance(content, str):
        return content
    out = []
    for b in content if isinstance(content, list) else []:
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str):
            out.append(b["text"])
        elif isinstance(b, dict) and b.get("type") == "tool_result":
            out.append(_text(b.get("content", "")))
    return "".join(out)


def _words(s: str) -> int:
    return len(s.split())


def _check(body) -> dict:
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    if not isinstance(body.get("model"), str):
        raise BadRequest("model: Field required")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        raise BadRequest("max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or \
            not all(isinstance(m, dict) and m.get("role") in ("user", "assistant")
                    for m in messages):
        raise BadRequest("messages: a non-empty list of user and assistant turns")
    return body


def answer(body: dict) -> tuple[list[dict], str, str | None, dict]:
    """The content blocks, stop_reason, stop_sequence and usage for a request."""
    messages = body["messages"]
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    content = last.get("content") if last else ""
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] \
        if isinstance(content, list) else []
    text = _text(content)
    tools = body.get("tools") or []
    system = body.get("system") or ""
    usage = {"input_tokens": _words(_text(system)) +
             sum(_words(_text(m.get("content"))) for m in messages)}
    if not results and text.startswith(USE_A_TOOL) and tools:
        tool_input = {"query": text[len(USE_A_TOOL):].strip()}
        usage["output_tokens"] = _words(json.dumps(tool_input))
        block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24],
                 "name": tools[0].get("name", ""), "input": tool_input}
        return [block], "tool_use", None, usage
    reply = ("tool said: " + "".join(_text(r.get("content", "")) for r in results)) \
        if results else "echo: " + text
    stop_reason, stop_sequence = "end_turn", None
    for seq in body.get("stop_sequences") or []:
        at = reply.find(seq) if seq else -1
        if at >= 0:
            reply, stop_reason, stop_sequence = reply[:at], "stop_sequence", seq
            break
    if _words(reply) > body["max_tokens"]:
        reply, stop_reason = "".join(WORD.findall(reply)[:body["max_tokens"]]).rstrip(), \
            "max_tokens"
    usage["output_tokens"] = _words(reply)
    return [{"type": "text", "text": reply}], stop_reason, stop_sequence, usage


def _headers(handler, body: dict) -> None:
    key = handler.headers.get("X-API-Key")
    if key is not None:
        handler.send_header("X-Demo-Api-Key-Sha256",
                            hashlib.sha256(key.encode("latin-1")).hexdigest())
    handler.send_header("X-Demo-Anthropic-Version",
                        handler.headers.get("anthropic-version") or "")
    handler.send_header("X-Demo-Max-Tokens", str(body.get("max_tokens")))
    handler.send_header("X-Demo-Saw-System", "yes" if body.get("system") else "no")
    handler._demo_headers()


def messages(handler, body) -> None:
    """Answer a Messages request, as one JSON body or as an SSE stream."""
    body = _check(body)
    blocks, stop_reason, stop_sequence, usage = answer(body)
    message = {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message",
               "role": "assistant", "model": body["model"], "content": blocks,
               "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": usage}
    if body.get("stream") is True:
        _stream(handler, body, message)
        return
    out = json.dumps(message, ensure_ascii=False).encode("utf-8")
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(out)))
    _headers(handler, body)
    handler.end_headers()
    handler.wfile.write(out)


def _events(handler, message: dict) -> list[tuple[str, dict]]:
    start = dict(message, content=[], stop_reason=None, stop_sequence=None,
                 usage={"input_tokens": message["usage"]["input_tokens"], "output_tokens": 1})
    events = [("message_start", {"type": "message_start", "message": start})]
    bad = handler.headers.get("X-Demo-Bad-Tool-Json") == "yes"
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            for word in WORD.findall(block["text"]):
                events.append(("content_block_delta", {
                    "type": "content_block_delta", "index": i,
                    "delta": {"type": "text_delta", "text": word}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": dict(block, input={})}))
            args = json.dumps(block["input"], ensure_ascii=False)
            if bad:
                args = args[:-1] + ', "broken'
            half = len(args) // 2
            for piece in (args[:half], args[half:]):
                events.append(("content_block_delta", {
                    "type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"],
                  "stop_sequence": message["stop_sequence"]},
        "usage": message["usage"]}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _stream(handler, body: dict, message: dict) -> None:
    delay = handler._header_number("X-Demo-Chunk-Delay-Ms", handler.server.chunk_delay_ms)
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Transfer-Encoding", "chunked")
    _headers(handler, body)
    handler.end_headers()
    try:
        for i, (name, data) in enumerate(_events(handler, message)):
            if i and delay:
                time.sleep(delay / 1000.0)
            handler._write_chunk(f"event: {name}\ndata: ".encode() +
                                 json.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n\n")
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        handler.server.streams["aborted"] += 1
        handler.close_connection = True
        return
    handler.server.streams["completed"] += 1
