"""Server-sent-event streams of the three caller APIs, and their events put back
together into the answer a call without `stream` would have given:

    stream = client.chat("chat-demo", messages, stream=True)
    for chunk in stream: ...           # each event as it arrives (a dict)
    stream.final()                     # the whole completion, tool calls assembled

Chat chunks carry `choices[i].delta` (text, and tool calls whose `arguments` come in
pieces by `index`); Anthropic's Messages events `content_block_start` /
`content_block_delta` (`text_delta`, `input_json_delta`) / `message_delta`; the
Responses API's `response.output_item.added`, `response.output_text.delta`,
`response.function_call_arguments.delta` and `response.completed`.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Optional

import requests

from sluice_client import errors


def events(resp: requests.Response) -> Iterator[dict]:
    """The events of a server-sent-event stream, decoded, until [DONE] or its end; an
    error event raises its typed error where it arrives."""
    request_id = resp.headers.get("X-Request-Id")
    try:
        if not resp.headers.get("Content-Type", "").startswith("text/event-stream"):
            # a backend that does not stream answers whole: one chunk of it
            yield resp.json()
            return
        data: list[bytes] = []
        for line in resp.iter_lines(decode_unicode=False):
            if line.startswith(b"data:"):
                data.append(line[5:].strip())
                continue
            if line or not data:        # event:, id:, comments; an empty event
                continue
            payload, data = b"\n".join(data), []
            if payload == b"[DONE]":
                return
            yield _decoded(payload, request_id)
        if data and data != [b"[DONE]"]:   # the last event without its blank line
            yield _decoded(b"\n".join(data), request_id)
    except requests.exceptions.RequestException as exc:
        raise errors.APIConnectionError(f"the stream broke: {exc.__class__.__name__}",
                                        request_id=request_id) from exc
    finally:
        resp.close()


def _decoded(payload: bytes, request_id: Optional[str]) -> dict:
    try:
        event = json.loads(payload)
    except ValueError:
        raise errors.SluiceError("a stream event is not JSON", request_id=request_id,
                                 body=payload.decode("utf-8", "replace")) from None
    if isinstance(event, dict):
        error = errors.from_event(event, request_id)
        if error is not None:
            raise error
    return event


class Stream:
    """An iterator of a stream's events that also puts them together: `final()` reads
    what is left and returns the whole answer (after a `break`, what came)."""

    def __init__(self, source: Iterator[dict], assembler: Any):
        self._source = source
        self.assembler = assembler

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> dict:
        event = next(self._source)
        self.assembler.add(event)
        return event

    def final(self) -> dict:
        for _ in self:
            pass
        return self.assembler.result()

    def close(self) -> None:
        close = getattr(self._source, "close", None)
        if close:
            close()


class ChatAssembler:
    """Chat completion chunks into one chat.completion."""

    def __init__(self) -> None:
        self.head: dict = {}
        self.choices: dict[int, dict] = {}
        self.usage: Optional[dict] = None

    def add(self, chunk: dict) -> None:
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "created", "model")}
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            index = choice.get("index", 0)
            into = self.choices.setdefault(index, {"index": index, "role": "assistant",
                                                   "text": [], "calls": {},
                                                   "finish_reason": None})
            delta = choice.get("delta") or choice.get("message") or {}
            if delta.get("role"):
                into["role"] = delta["role"]
            if delta.get("content"):
                into["text"].append(delta["content"])
            for call in delta.get("tool_calls") or ():
                at = into["calls"].setdefault(call.get("index", len(into["calls"])), {
                    "id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                at["id"] = call.get("id") or at["id"]
                fn = call.get("function") or {}
                at["function"]["name"] += fn.get("name") or ""
                at["function"]["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                into["finish_reason"] = choice["finish_reason"]

    def result(self) -> dict:
        choices = []
        for index in sorted(self.choices):
            c = self.choices[index]
            message: dict = {"role": c["role"],
                             "content": "".join(c["text"]) if c["text"] else None}
            if c["calls"]:
                message["tool_calls"] = [c["calls"][i] for i in sorted(c["calls"])]
            choices.append({"index": index, "message": message,
                            "finish_reason": c["finish_reason"]})
        answer = {**self.head, "object": "chat.completion", "choices": choices}
        if self.usage is not None:
            answer["usage"] = self.usage
        return answer


class MessageAssembler:
    """Anthropic Messages events into one message; a tool_use block's input from its
    input_json_delta pieces."""

    def __init__(self) -> None:
        self.message: dict = {"type": "message", "role": "assistant", "content": []}
        self.json: dict[int, list[str]] = {}

    def add(self, event: dict) -> None:
        kind = event.get("type")
        content = self.message["content"]
        if kind == "message":           # a backend that answered whole
            self.message.update(event)
        elif kind == "message_start":
            start = dict(event.get("message") or {})
            start["content"] = list(start.get("content") or ())
            self.message.update(start)
        elif kind == "content_block_start":
            block = dict(event.get("content_block") or {})
            while len(content) <= event.get("index", len(content)):
                content.append(None)
            content[event.get("index", len(content) - 1)] = block
        elif kind == "content_block_delta":
            index, delta = event.get("index", 0), event.get("delta") or {}
            block = content[index] if index < len(content) else None
            if block is None:
                return
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                self.json.setdefault(index, []).append(delta.get("partial_json", ""))
        elif kind == "content_block_stop":
            index = event.get("index", 0)
            if index in self.json and index < len(content) and content[index]:
                content[index]["input"] = _json_object("".join(self.json.pop(index)))
        elif kind == "message_delta":
            self.message.update(event.get("delta") or {})
            usage = {**(self.message.get("usage") or {}), **(event.get("usage") or {})}
            self.message["usage"] = usage

    def result(self) -> dict:
        return {**self.message, "content": [b for b in self.message["content"] if b]}


class ResponseAssembler:
    """Responses API events into one response: its output items, text and function
    call arguments put together from their deltas; response.completed's own response
    where it carries its output."""

    def __init__(self) -> None:
        self.response: dict = {"object": "response", "output": []}
        self.items: dict[int, dict] = {}

    def add(self, event: dict) -> None:
        kind = event.get("type", "")
        if event.get("object") == "response":      # a backend that answered whole
            self.response.update(event)
        elif kind in ("response.created", "response.in_progress", "response.completed",
                    "response.incomplete"):
            self.response.update({k: v for k, v in (event.get("response") or {}).items()
                                  if k != "output" or v})
        elif kind == "response.output_item.added":
            item = dict(event.get("item") or {})
            if item.get("type") == "message":
                item["content"] = list(item.get("content") or ())
            self.items[event.get("output_index", len(self.items))] = item
        elif kind == "response.output_item.done" and event.get("item"):
            self.items[event.get("output_index", 0)] = event["item"]
        elif kind == "response.content_part.added":
            item = self.items.get(event.get("output_index", 0))
            if item is not None:
                parts = item.setdefault("content", [])
                while len(parts) <= event.get("content_index", 0):
                    parts.append({"type": "output_text", "text": ""})
                parts[event.get("content_index", 0)] = dict(event.get("part") or {})
        elif kind == "response.output_text.delta":
            item = self.items.get(event.get("output_index", 0))
            if item is not None:
                parts = item.setdefault("content", [])
                while len(parts) <= event.get("content_index", 0):
                    parts.append({"type": "output_text", "text": ""})
                part = parts[event.get("content_index", 0)]
                part["text"] = part.get("text", "") + event.get("delta", "")
        elif kind == "response.function_call_arguments.delta":
            item = self.items.get(event.get("output_index", 0))
            if item is not None:
                item["arguments"] = item.get("arguments", "") + event.get("delta", "")

    def result(self) -> dict:
        answer = dict(self.response)
        if not answer.get("output"):
            answer["output"] = [self.items[i] for i in sorted(self.items)]
        return answer


def _json_object(text: str) -> Any:
    """A tool_use block's input from its pieces: {} for none; the text itself when it
    is not JSON (the caller sees what the model sent)."""
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return text


def chat_texts(stream: Iterator[dict]) -> Iterator[str]:
    for chunk in stream:
        for choice in chunk.get("choices") or ():
            piece = (choice.get("delta") or choice.get("message") or {}).get("content")
            if piece:
                yield piece
