"""The demo ``openai_responses`` backend: the OpenAI Responses API natively.

``POST /v1/responses`` answers as the demo chat backend does (``openai_chat.py``):
``"echo: <last user text>"``; offered function ``tools``, a last user message that
begins with ``use a tool`` calls the first one with ``{"query": "<rest>"}`` (``use
every tool``: each, in parallel), and a last ``function_call_output`` is answered
``"tool said: <output>"``. Plain JSON, or with ``"stream": true`` Responses' semantic
events in the documented order. Responses are kept in memory unless ``"store":
false``; ``previous_response_id`` continues a kept one (its input and output come
before this input). Usage counts words.

A kept response is read back (``GET /v1/responses/{id}``), deleted (``DELETE``: ``{"id",
"object": "response.deleted", "deleted": true}``), its input items listed (``GET
/v1/responses/{id}/input_items``: a list object, ``order`` ``desc`` by default,
``limit`` 20; no ``after`` paging) and cancelled (``POST /v1/responses/{id}/cancel``).
A ``"background": true`` request is answered at once with status ``queued`` and stays
so (the demo runs nothing in the background) until cancelled: status ``cancelled``.
Cancelling a response that is not a background one is a 400, as OpenAI answers.
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
KEPT_PATH = re.compile(r"^/v1/responses/([A-Za-z0-9_-]+)(/input_items|/cancel)?$")
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


def _keep(response: dict, conversation: list, items: list) -> None:
    with _lock:
        _kept[response["id"]] = {**response, "_conversation": conversation, "_input": items}
        while len(_kept) > KEPT_MAX:
            _kept.pop(next(iter(_kept)))


def create(handler, _match, body) -> None:
    """POST /v1/responses: one JSON answer, or Responses' stream events."""
    response, conversation = answer(body)
    if body.get("background") is True:
        response.update(status="queued", background=True, store=True)
    if response["store"]:
        _keep(response, conversation, _input(body))
    if body.get("stream") is True and not response.get("background"):
        _stream(handler, response)
        return
    handler._send_json(200, response)


def route(handler, method: str, path: str) -> bool:
    """A kept response's paths: True when `path` was one (and was answered)."""
    match = KEPT_PATH.match(path)
    if match is None:
        return False
    rid, rest = match.group(1), match.group(2)
    with _lock:
        kept = _kept.get(rid)
        if kept is not None and method == "DELETE" and rest is None:
            del _kept[rid]
        if kept is not None and method == "POST" and rest == "/cancel" \
                and kept.get("background"):
            kept["status"] = "cancelled"
    if kept is None:
        handler._send_error(404, f"No response found with id '{rid}'.")
    elif method == "DELETE" and rest is None:
        handler._send_json(200, {"id": rid, "object": "response.deleted", "deleted": True})
    elif method == "GET" and rest == "/input_items":
        handler._send_json(200, _input_items(kept["_input"], handler.path.partition("?")[2]))
    elif method == "POST" and rest == "/cancel":
        if not kept.get("background"):
            handler._send_error(400, "Only responses created with background=true can be"
                                     " cancelled.")
        else:
            handler._send_json(200, _public(kept))
    elif method == "GET" and rest is None:
        handler._send_json(200, _public(kept))
    else:
        handler._send_error(405, f"{method} is not allowed on {path}")
    return True


def _public(kept: dict) -> dict:
    return {k: v for k, v in kept.items() if not k.startswith("_")}


def _input_items(items: list, query: str) -> dict:
    """The list object of a response's input items (ids given as the demo kept them)."""
    args = dict(part.partition("=")[::2] for part in query.split("&") if part)
    data = []
    for n, item in enumerate(items):
        item = {"id": item.get("id") or f"item_{n}", "type": "message", **item}
        if item["type"] == "message":
            content = item.get("content")
            if isinstance(content, str):
                content = [{"type": "input_text", "text": content}]
            item.update(content=content, status="completed")
        data.append(item)
    if args.get("order", "desc") == "desc":
        data.reverse()
    try:
        limit = max(1, min(100, int(args.get("limit", "20"))))
    except ValueError:
        raise BadRequest("'limit' must be an integer") from None
    page = data[:limit]
    return {"object": "list", "data": page, "has_more": len(data) > limit,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None}


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
