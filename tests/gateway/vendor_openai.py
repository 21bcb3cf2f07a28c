"""Local imitations of the hosted vendors that speak OpenAI's chat API (OpenAI,
Azure OpenAI, DeepSeek, DashScope's compatible mode, Mistral, vLLM, SGLang), built
from each vendor's documented request and answer: the path it serves, the header its
key comes in, the query it requires, the body fields it reads, its error shape and
its stream framing. A request not shaped as the vendor wants is refused the way the
vendor refuses it, so a gateway that sends the wrong shape fails the test.

The answer: "<vendor> says: <last user text>"; a last user message "please fail"
gets the vendor's own 400 error, "please hang" an answer two seconds late; usage
counts whitespace-separated words."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from backend_http import Backend

FAIL = "please fail"
HANG = "please hang"


@dataclass(frozen=True)
class Vendor:
    name: str
    chat_path: str                     # where chat completions are POSTed
    key: str | None                    # None: no key wanted (a local vLLM)
    key_header: str = "Authorization"
    key_format: str = "Bearer {key}"
    query: dict[str, str] = field(default_factory=dict)   # required query parameters
    error: str = "openai"              # the error shape (ERRORS)
    models: tuple[str, ...] = ()       # model names it knows (empty: any, as Azure)
    embeddings_path: str | None = None


def _openai_error(message: str, code: str) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": code}}


# Each vendor's documented error body for a 4xx, from its message and code.
ERRORS = {
    # platform.openai.com/docs/guides/error-codes; DeepSeek answers the same shape
    "openai": _openai_error,
    # Azure: {"error": {"code": "...", "message": "..."}} (no type or param)
    "azure": lambda message, code: {"error": {"code": code, "message": message}},
    # DashScope compatible mode: OpenAI's, plus the request id
    "dashscope": lambda message, code: {**_openai_error(message, code),
                                        "request_id": "8d8a0b3c-dashscope"},
    # Mistral, vLLM and SGLang: a flat object
    "flat": lambda message, code: {"object": "error", "message": message,
                                   "type": "invalid_request_error", "param": None,
                                   "code": code},
}

VENDORS = {v.name: v for v in (
    Vendor("openai", "/v1/chat/completions", "sk-openai-test",
           models=("gpt-4o-mini",), embeddings_path="/v1/embeddings"),
    Vendor("azure_openai", "/openai/deployments/gpt4o-prod/chat/completions", "az-key-123",
           key_header="api-key", key_format="{key}",
           query={"api-version": "2024-10-21"}, error="azure",
           embeddings_path="/openai/deployments/gpt4o-prod/embeddings"),
    Vendor("deepseek", "/v1/chat/completions", "sk-deepseek-test", models=("deepseek-chat",)),
    Vendor("dashscope", "/compatible-mode/v1/chat/completions", "sk-dashscope-test",
           error="dashscope", models=("qwen-plus",)),
    Vendor("mistral", "/v1/chat/completions", "mistral-key", error="flat",
           models=("mistral-small-latest",)),
    Vendor("vllm", "/v1/chat/completions", None, error="flat",
           models=("Qwen/Qwen2.5-7B-Instruct",)),
    Vendor("sglang", "/v1/chat/completions", "sglang-key", error="flat",
           models=("meta-llama/Llama-3.1-8B-Instruct",)),
    # a self-hosted server behind a proxy that wants its key as X-API-Key
    Vendor("keyed_proxy", "/v1/chat/completions", "proxy-key", key_header="X-API-Key",
           key_format="{key}", models=("proxied-model",)),
)}


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def handler_for(vendor: Vendor) -> type[Backend]:
    """An HTTP handler class imitating `vendor`; each request it takes is appended to
    the class's `seen` (method, path, query, headers, body) for the test to read."""

    class Imitation(Backend):
        seen: list[dict] = []

        def refuse(self, status: int, message: str, code: str) -> None:
            self.answer(status, json.dumps(ERRORS[vendor.error](message, code)).encode())

        def do_POST(self):
            parts = urlsplit(self.path)
            raw = self.read_body()
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            self.seen.append({"path": parts.path, "query": query,
                              "headers": {k.lower(): v for k, v in self.headers.items()},
                              "body": body})
            if parts.path not in (vendor.chat_path, vendor.embeddings_path):
                return self.refuse(404, f"no route {parts.path}", "not_found")
            for name, value in vendor.query.items():
                if query.get(name) != value:
                    return self.refuse(404, "Resource not found", "404")
            if vendor.key is not None:
                sent = self.headers.get(vendor.key_header)
                if sent != vendor.key_format.format(key=vendor.key):
                    return self.refuse(401, "Incorrect API key provided", "invalid_api_key")
            if vendor.key_header != "Authorization" and self.headers.get("Authorization"):
                return self.refuse(401, "unexpected Authorization header", "invalid_auth")
            if vendor.key_header != "X-API-Key" and self.headers.get("X-API-Key"):
                return self.refuse(401, "unexpected X-API-Key header", "invalid_auth")
            if not isinstance(body, dict):
                return self.refuse(400, "body is not JSON", "invalid_json")
            model = body.get("model")
            if vendor.models and model not in vendor.models:
                return self.refuse(404, f"The model `{model}` does not exist", "model_not_found")
            if parts.path == vendor.embeddings_path:
                return self.embeddings(body, model)
            return self.chat(body, model)

        def embeddings(self, body: dict, model) -> None:
            inputs = body.get("input")
            inputs = [inputs] if isinstance(inputs, str) else inputs
            data = [{"object": "embedding", "index": i, "embedding": [float(len(s)), 0.5]}
                    for i, s in enumerate(inputs)]
            n = sum(len(s.split()) for s in inputs)
            self.answer(200, json.dumps({"object": "list", "data": data, "model": model,
                                         "usage": {"prompt_tokens": n,
                                                   "total_tokens": n}}).encode())

        def chat(self, body: dict, model) -> None:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                return self.refuse(400, "messages must be a non-empty array", "invalid_value")
            user = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
            last = user[-1] if user else ""
            if last == FAIL:
                return self.refuse(400, f"{vendor.name} refused: bad input", "invalid_value")
            if last == HANG:
                time.sleep(2)   # past the model's timeout in the tests that send it
            answer = f"{vendor.name} says: {last}"
            prompt = sum(len(_text(m.get("content")).split()) for m in messages)
            usage = {"prompt_tokens": prompt, "completion_tokens": len(answer.split()),
                     "total_tokens": prompt + len(answer.split())}
            ident, created = "chatcmpl-imitation", int(time.time())
            model = model or "gpt-4o"   # Azure answers with the deployment's model
            if body.get("stream") is True:
                return self.stream(ident, created, model, answer, usage, body)
            self.answer(200, json.dumps({
                "id": ident, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": answer}}],
                "usage": usage}).encode())

        def stream(self, ident, created, model, answer, usage, body) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            base = {"id": ident, "object": "chat.completion.chunk", "created": created,
                    "model": model}
            frames = []
            if vendor.name == "azure_openai":
                # Azure's first frame: the prompt's content-filter results, no choices
                frames.append({**base, "choices": [], "prompt_filter_results": [
                    {"prompt_index": 0, "content_filter_results": {}}]})
            frames.append({**base, "choices": [{"index": 0, "finish_reason": None,
                                                "delta": {"role": "assistant", "content": ""}}]})
            for word in answer.split(" "):
                frames.append({**base, "choices": [{"index": 0, "finish_reason": None,
                                                    "delta": {"content": word + " "}}]})
            frames.append({**base, "choices": [{"index": 0, "finish_reason": "stop",
                                                "delta": {}}]})
            options = body.get("stream_options") or {}
            if options.get("include_usage"):
                frames.append({**base, "choices": [], "usage": usage})
            for f in frames:
                self.chunk(b"data: " + json.dumps(f).encode() + b"\n\n")
            self.chunk(b"data: [DONE]\n\n")
            self.chunk(b"")

        def chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    return Imitation
