"""An OpenAI-protocol backend whose model calls tools, as OpenAI's does: the SDK tests
send `tools` through the gateway's chat endpoint and read the calls back, whole and
streamed (arguments in small pieces, parallel calls interleaved by `index`).

- last user message "use a tool <rest>": calls the first tool, {"query": "<rest>"};
- "use tools <rest>": calls every tool at once, tool i with {"query": "<rest>", "n": i};
- a last `tool` message: answers "tool said: <content>" (each tool message's, joined
  by "; " when several answer);
- anything else: "echo: <text>".
"""
from __future__ import annotations

import json

from backend_http import Backend

PIECE = 4   # characters of arguments per streamed chunk


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def plan(body: dict) -> tuple[str | None, list[dict]]:
    """(text, tool calls) the model answers `body` with."""
    messages = body.get("messages") or []
    tail = []
    for m in reversed(messages):
        if m.get("role") != "tool":
            break
        tail.append(_text(m.get("content")))
    if tail:
        return "tool said: " + "; ".join(reversed(tail)), []
    user = [m for m in messages if m.get("role") == "user"]
    text = _text(user[-1].get("content")) if user else ""
    tools = [t["function"]["name"] for t in body.get("tools") or ()]
    if tools and text.startswith("use a tool"):
        rest = text[len("use a tool"):].strip()
        return None, [{"id": "call_0", "name": tools[0], "arguments": {"query": rest}}]
    if tools and text.startswith("use tools"):
        rest = text[len("use tools"):].strip()
        return None, [{"id": f"call_{i}", "name": name,
                       "arguments": {"query": rest, "n": i}}
                      for i, name in enumerate(tools)]
    return "echo: " + text, []


class ToolModel(Backend):
    def do_POST(self):
        body = json.loads(self.read_body() or b"{}")
        text, calls = plan(body)
        finish = "tool_calls" if calls else "stop"
        usage = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
        if body.get("stream") is not True:
            message = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"],
                                  "arguments": json.dumps(c["arguments"])}}
                    for c in calls]
            self.answer(200, json.dumps({
                "id": "chatcmpl-tools", "object": "chat.completion", "created": 1,
                "model": body.get("model"), "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }).encode())
            return
        out = [self._chunk({"role": "assistant", "content": None if calls else ""})]
        if text:   # word by word
            out += [self._chunk({"content": (" " if i else "") + word})
                    for i, word in enumerate(text.split(" "))]
        for i, c in enumerate(calls):   # each call's head: id and name, no arguments yet
            out.append(self._chunk({"tool_calls": [{
                "index": i, "id": c["id"], "type": "function",
                "function": {"name": c["name"], "arguments": ""}}]}))
        pieces = [(i, json.dumps(c["arguments"])) for i, c in enumerate(calls)]
        longest = max((len(a) for _, a in pieces), default=0)
        for at in range(0, longest, PIECE):       # the calls' pieces interleaved
            for i, args in pieces:
                if at < len(args):
                    out.append(self._chunk({"tool_calls": [{
                        "index": i, "function": {"arguments": args[at:at + PIECE]}}]}))
        out.append(self._chunk({}, finish))
        frames = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in out)
        self.answer(200, frames + b"data: [DONE]\n\n", "text/event-stream")

    @staticmethod
    def _chunk(delta: dict, finish: str | None = None) -> dict:
        return {"id": "chatcmpl-tools", "object": "chat.completion.chunk", "created": 1,
                "model": "tools", "choices": [{"index": 0, "delta": delta,
                                               "finish_reason": finish}]}
