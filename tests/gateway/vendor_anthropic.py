"""A local imitation of Anthropic's Messages API (api.anthropic.com), from
docs.anthropic.com/en/api/messages: POST /v1/messages with the key in x-api-key and an
anthropic-version header, a body with `model`, `max_tokens` (required), `messages`
(user/assistant, content a string or blocks) and an optional `system`; answers a
`message` with `content` blocks, `stop_reason` and `usage` (input_tokens,
output_tokens); errors as {"type": "error", "error": {"type", "message"}}; streams as
named SSE events (message_start, content_block_start, ping, content_block_delta with
text_delta, content_block_stop, message_delta, message_stop).

The answer: "anthropic says: <last user text>"; a last user text "please fail" gets a
400 invalid_request_error. A body the real API would refuse (a field it does not know,
a `system` or `tool` role inside `messages`, no `max_tokens`) gets its 400 too."""
from __future__ import annotations

import json

from backend_http import Backend

KEY = "sk-ant-test-key"
VERSION = "2023-06-01"
MODEL = "claude-sonnet-4-5"
FAIL = "please fail"
FIELDS = {"model", "messages", "max_tokens", "system", "stop_sequences", "stream",
          "temperature", "top_p", "top_k", "metadata", "tools", "tool_choice", "thinking",
          "service_tier"}


def _text(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


class AnthropicImitation(Backend):
    seen: list[dict] = []

    def refuse(self, status: int, err_type: str, message: str) -> None:
        self.answer(status, json.dumps({"type": "error", "error": {
            "type": err_type, "message": message}}).encode(),
            headers={"request-id": "req_imitation"})

    def do_POST(self):
        raw = self.read_body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.seen.append({"path": self.path,
                          "headers": {k.lower(): v for k, v in self.headers.items()},
                          "body": body})
        if self.path != "/v1/messages":
            return self.refuse(404, "not_found_error", f"no route {self.path}")
        if any(len(self.headers.get_all(h) or []) != 1
               for h in ("x-api-key", "anthropic-version")):
            return self.refuse(400, "invalid_request_error",
                               "x-api-key and anthropic-version: each exactly once")
        if self.headers.get("x-api-key") != KEY:
            return self.refuse(401, "authentication_error", "invalid x-api-key")
        if self.headers.get("anthropic-version") != VERSION:
            return self.refuse(400, "invalid_request_error",
                               "anthropic-version: header is required")
        if self.headers.get("Authorization"):
            return self.refuse(401, "authentication_error", "unexpected Authorization")
        if not isinstance(body, dict) or body.get("model") != MODEL:
            return self.refuse(404, "not_found_error", "model: not found")
        unknown = sorted(set(body) - FIELDS)
        if unknown:
            return self.refuse(400, "invalid_request_error",
                               f"{unknown[0]}: Extra inputs are not permitted")
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
            return self.refuse(400, "invalid_request_error", "max_tokens: Field required")
        if not isinstance(body.get("system", ""), (str, list)):
            return self.refuse(400, "invalid_request_error",
                               "system: Input should be a valid string or list")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or \
                any(m.get("role") not in ("user", "assistant") for m in messages):
            return self.refuse(400, "invalid_request_error",
                               "messages: roles must be user or assistant")
        last = _text(messages[-1]["content"])
        if last == FAIL:
            return self.refuse(400, "invalid_request_error", "anthropic refused: bad input")
        answer = f"anthropic says: {last}"
        usage = {"input_tokens": sum(len(_text(m["content"]).split()) for m in messages),
                 "output_tokens": len(answer.split())}
        message = {"id": "msg_imitation", "type": "message", "role": "assistant",
                   "model": MODEL, "content": [{"type": "text", "text": answer}],
                   "stop_reason": "end_turn", "stop_sequence": None, "usage": usage}
        if body.get("stream") is True:
            return self.stream(message, answer, usage)
        self.answer(200, json.dumps(message).encode())

    def stream(self, message: dict, answer: str, usage: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        start = {**message, "content": [], "stop_reason": None,
                 "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1}}
        events = [("message_start", {"type": "message_start", "message": start}),
                  ("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}),
                  ("ping", {"type": "ping"})]
        words = answer.split(" ")
        for i, w in enumerate(words):
            events.append(("content_block_delta", {
                "type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": w + (" " if i < len(words) - 1 else "")}}))
        events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
                   ("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                      "usage": {"output_tokens": usage["output_tokens"]}}),
                   ("message_stop", {"type": "message_stop"})]
        for name, data in events:
            frame = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
        self.wfile.write(b"0\r\n\r\n")
