"""The demo ``openai_responses`` backend: the OpenAI Responses API natively.

``POST /v1/responses`` answers as the demo chat backend does (``openai_chat.py``):
``"echo: <last user text>"``; offered function ``tools``, a last user message that
begins with ``use a tool`` calls the first one with ``{"query": "<rest>"}`` (``use
every tool``: each, in parallel), and a last ``function_call_output`` is answered
``"tool said: <output>"``. Plain JSON, or with ``"stream": true`` Responses' semantic
events in the documented order. Responses are kept in memory unless ``"store":
false``; ``previous_response_id`` continues a kept one (its input and output come
before this input) and ``GET /v1/responses/{id}`` reads one back. Usage counts words.
"""
from __future__ import annotations

import json
import re
import threading
import time
import uuid

from control_plane.demo import openai_chat
from control_plane.demo.protocols import BadRequest

PATH = "/v1/responses"
GET_PATH = re.compile(r"^/v1/responses/([A-Za-z0-9_-]+)$")
WORD = re.compile(r"\S+\s*")
KEPT_MAX = 1000   # responses kept in memory, oldest dropped first

_kept: dict[str, dict] = {}
_lock = threading.Lock()


def _messages(items: list) -> list[dict]:
    """Responses input items as chat messages (enough for the demo's answer)."""
    out = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item.get("role"), "content": _text(item.get("content"))})
        elif kind == "function_call_output":
            out.append({"role": "tool", "content": _text(item.get("output"))})
        elif kind == "function_call":
            out.append({"role": "assistant", "content": ""})
    return out


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict)
                       and isinstance(p.get("text"), str))
    return ""


def _input(body: dict) -> list:
    inp = body.get("input")
    if isinstance(inp, str):
        return [{"type": "message", "role": "user", "content": inp}]
    if isinstance(inp, list) and all(isinstance(i, dict) for i in inp):
        return inp
    raise BadRequest("'input' must be a string or a list of items")


def answer(body) -> tuple[dict, list]:
    """The response object for request `body`, and the conversation it continues."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    items = _input(body)
    before = []
    prev = body.get("previous_response_id")
    if prev is not None:
        with _lock:
            kept = _kept.get(prev)
        if kept is None:
            raise BadRequest(f"Previous response with id '{prev}' not found.")
        before = kept["_conversation"] + kept["output"]
    conversation = before + items
    messages = _messages(conversation)
    if isinstance(body.get("instructions"), str):
        messages.insert(0, {"role": "system", "content": body["instructions"]})
    tools = [{"type": "function", "function": {"name": t.get("name")}}
             for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
    user = [m for m in messages if m["role"] == "user"]
    text = "echo: " + (user[-1]["content"] if user else "")
    if messages and messages[-1]["role"] == "tool":
        text = "tool said: " + messages[-1]["content"]
    calls = openai_chat._tool_calls(tools, messages[-1]) if messages else []
    rid = "resp_" + uuid.uuid4().hex[:24]
    output = []
    if calls:
        for c in calls:
            output.append({"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:20],
                           "call_id": c["id"], "name": c["function"]["name"],
                           "arguments": c["function"]["arguments"], "status": "completed"})
        out_tokens = sum(len(c["arguments"].split()) for c in output)
    else:
        output.append({"type": "message", "id": "msg_" + uuid.uuid4().hex[:20],
                       "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
        out_tokens = len(text.split())
    in_tokens = sum(len(m["content"].split()) for m in messages)
    response = {
        "id": rid, "object": "response", "created_at": int(time.time()),
        "status": "completed", "model": body.get("model"), "output": output,
        "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"), "metadata": body.get("metadata") or {},
        "previous_response_id": prev, "store": body.get("store") is not False,
        "tools": body.get("tools") or [], "tool_choice": body.get("tool_choice", "auto"),
        "parallel_tool_calls": True, "temperature": 1, "top_p": 1,
        "text": {"format": {"type": "text"}}, "truncation": "disabled",
        "usage": {"input_tokens": in_tokens, "output_tokens": out_tokens,
                  "total_tokens": in_tokens + out_tokens,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }
    return response, conversation


def _keep(response: dict, conversation: list) -> None:
    with _lock:
        _kept[response["id"]] = {**response, "_conversation": conversation}
        while len(_kept) > KEPT_MAX:
            _kept.pop(next(iter(_kept)))


def create(handler, _match, body) -> None:
    """POST /v1/responses: one JSON answer, or Responses' stream events."""
    response, conversation = answer(body)
    if response["store"]:
        _keep(response, conversation)
    if body.get("stream") is True:
        _stream(handler, response)
        return
    handler._send_json(200, response)


def get(handler, rid: str) -> None:
    """GET /v1/responses/{id}: a kept response, or 404."""
    with _lock:
        kept = _kept.get(rid)
    if kept is None:
        handler._send_error(404, f"No response found with id '{rid}'.")
        return
    handler._send_json(200, {k: v for k, v in kept.items() if k != "_conversation"})


def events(response: dict) -> list[dict]:
    """The stream of `response`: Responses' semantic events in order."""
    start = {**response, "status": "in_progress", "output": [], "usage": None}
    out = [{"type": "response.created", "response": start},
           {"type": "response.in_progress", "response": start}]
    for i, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            out.append({"type": "response.output_item.added", "output_index": i,
                        "item": {**item, "status": "in_progress", "content": []}})
            where = {"item_id": item["id"], "output_index": i, "content_index": 0}
            out.append({"type": "response.content_part.added", **where,
                        "part": {"type": "output_text", "text": "", "annotations": []}})
            out += [{"type": "response.output_text.delta", **where, "delta": w}
                    for w in WORD.findall(text)]
            out.append({"type": "response.output_text.done", **where, "text": text})
            out.append({"type": "response.content_part.done", **where,
                        "part": item["content"][0]})
        else:
            args = item["arguments"]
            out.append({"type": "response.output_item.added", "output_index": i,
                        "item": {**item, "status": "in_progress", "arguments": ""}})
            where = {"item_id": item["id"], "output_index": i}
            out += [{"type": "response.function_call_arguments.delta", **where, "delta": piece}
                    for piece in (args[:len(args) // 2], args[len(args) // 2:])]
            out.append({"type": "response.function_call_arguments.done", **where,
                        "arguments": args})
        out.append({"type": "response.output_item.done", "output_index": i, "item": item})
    out.append({"type": "response.completed", "response": response})
    for n, ev in enumerate(out):
        ev["sequence_number"] = n
    return out


def _stream(handler, response: dict) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Transfer-Encoding", "chunked")
    handler._demo_headers()
    handler.end_headers()
    try:
        for ev in events(response):
            handler._write_chunk(f"event: {ev['type']}\ndata: ".encode()
                                 + json.dumps(ev, ensure_ascii=False).encode("utf-8") + b"\n\n")
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        handler.server.streams["aborted"] += 1
        handler.close_connection = True
        return
    handler.server.streams["completed"] += 1
