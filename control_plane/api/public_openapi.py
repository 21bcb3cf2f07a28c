"""The OpenAPI 3.1 document of the gateway's caller API (docs/contracts.md, "Public
gateway API"; lua/sluice/endpoints.lua), kept here in one place.

    python -m control_plane.api.public_openapi      # rewrites docs/public-openapi.json

tests/unit/test_public_openapi.py checks that the file is this document and valid.
Unknown request fields pass through to the backends, so request bodies stay open
(`additionalProperties` is not false); the fields listed are the ones Sluice reads.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from control_plane.api.errors import REQUEST_ID_RE
from control_plane.models import NAME_PATTERN

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "public-openapi.json"
JSON = "application/json"
SSE = "text/event-stream"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


ERROR = {
    "type": "object", "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["code", "type", "message", "request_id"],
        "properties": {
            "code": {"type": "integer", "description": "the HTTP status"},
            "type": {"type": "string", "description":
                     "Sluice's type; for OpenAI callers, a request refused as malformed "
                     "is OpenAI's invalid_request_error, and an OpenAI backend's own "
                     "error keeps its type (rate_limit_error, ...)",
                     "examples": [
                "invalid_request", "unauthorized", "forbidden", "not_found",
                "payload_too_large", "rate_limited", "policy_violation", "backend_error",
                "backend_unavailable", "backend_timeout", "internal_error",
                "invalid_request_error"]},
            "message": {"type": "string"},
            "retry_after": {"type": "integer", "minimum": 0,
                            "description": "seconds; on 429 and on 503 when known"},
            "request_id": {"type": "string", "pattern": REQUEST_ID_RE.pattern},
            "param": {"type": ["string", "null"], "description":
                      "the request field at fault (strict requests: `temperature`, "
                      "`messages[0].role`, `params.max_tokens`); an OpenAI backend's own"},
            "backend_code": {"type": "string", "description":
                             "an OpenAI backend's own error code "
                             "(e.g. context_length_exceeded)"},
        }}},
}

MESSAGE = {
    "type": "object", "required": ["role"],
    "properties": {"role": {"type": "string",
                            "enum": ["system", "developer", "user", "assistant", "tool"]},
                   "content": {"anyOf": [{"type": "string"}, {"type": "array"},
                                         {"type": "null"}]},
                   "name": {"type": "string"}},
}
USAGE = {"type": "object", "properties": {
    "prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"},
    "total_tokens": {"type": "integer"}}}
MODEL_NAME = {"type": "string", "pattern": NAME_PATTERN}

SCHEMAS: dict[str, Any] = {
    "Error": ERROR,
    "ChatRequest": {
        "type": "object", "required": ["model", "messages"],
        "properties": {
            "model": MODEL_NAME,
            "messages": {"type": "array", "minItems": 1, "items": MESSAGE},
            "stream": {"type": "boolean", "default": False},
            "stream_options": {"type": "object", "properties": {
                "include_usage": {"type": "boolean"}}},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
            "top_p": {"type": "number", "minimum": 0, "maximum": 1},
            "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
            "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
            "max_tokens": {"type": "integer", "minimum": 1,
                           "description": "at most the model's max_output_tokens"},
            "max_completion_tokens": {"type": "integer", "minimum": 1,
                                      "description": "at most the model's max_output_tokens"},
            "n": {"type": "integer", "minimum": 1, "maximum": 128},
            "stop": {"anyOf": [{"type": "string"}, {"type": "array", "maxItems": 4,
                                                    "items": {"type": "string"}}]},
            "tools": {"type": "array", "items": {
                "type": "object", "required": ["type", "function"],
                "properties": {"type": {"const": "function"},
                               "function": {"type": "object", "required": ["name"],
                                            "properties": {
                                                "name": {"type": "string",
                                                         "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                                                "description": {"type": "string"},
                                                "parameters": {"type": "object"}}}}}},
        }},
    "ChatCompletion": {
        "type": "object", "required": ["choices"],
        "properties": {
            "id": {"type": "string"}, "object": {"const": "chat.completion"},
            "created": {"type": "integer"}, "model": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "object", "properties": {
                "index": {"type": "integer"}, "message": MESSAGE,
                "finish_reason": {"type": ["string", "null"]}}}},
            "usage": USAGE,
        }},
    "ChatCompletionChunk": {
        "type": "object", "description": "one `data:` event of a stream; the stream "
        "ends with `data: [DONE]`",
        "properties": {
            "id": {"type": "string"}, "object": {"const": "chat.completion.chunk"},
            "choices": {"type": "array", "items": {"type": "object", "properties": {
                "index": {"type": "integer"},
                "delta": {"type": "object", "properties": {
                    "role": {"type": "string"}, "content": {"type": ["string", "null"]}}},
                "finish_reason": {"type": ["string", "null"]}}}},
            "usage": {"anyOf": [USAGE, {"type": "null"}]},
        }},
    "CompletionRequest": {
        "type": "object", "required": ["model", "prompt"],
        "properties": {"model": MODEL_NAME,
                       "prompt": {"anyOf": [{"type": "string"},
                                            {"type": "array", "items": {"type": "string"}}]},
                       "stream": {"type": "boolean"},
                       "max_tokens": {"type": "integer", "minimum": 1},
                       "temperature": {"type": "number", "minimum": 0, "maximum": 2}}},
    "Completion": {
        "type": "object", "required": ["choices"],
        "properties": {"object": {"const": "text_completion"}, "model": {"type": "string"},
                       "choices": {"type": "array", "items": {"type": "object", "properties": {
                           "index": {"type": "integer"}, "text": {"type": "string"},
                           "finish_reason": {"type": ["string", "null"]}}}},
                       "usage": USAGE}},
    "EmbeddingRequest": {
        "type": "object", "required": ["model", "input"],
        "properties": {"model": MODEL_NAME,
                       "input": {"anyOf": [{"type": "string"},
                                           {"type": "array", "items": {"type": "string"}}]}}},
    "Embeddings": {
        "type": "object", "required": ["data"],
        "properties": {"object": {"const": "list"}, "model": {"type": "string"},
                       "data": {"type": "array", "items": {"type": "object", "properties": {
                           "index": {"type": "integer"},
                           "embedding": {"type": "array", "items": {"type": "number"}}}}},
                       "usage": USAGE}},
    "ModelObject": {
        "type": "object", "required": ["id", "object"],
        "properties": {"id": {"type": "string"}, "object": {"const": "model"},
                       "created": {"type": "integer"}, "owned_by": {"type": "string"}}},
    "ModelList": {
        "type": "object", "required": ["object", "data"],
        "properties": {"object": {"const": "list"},
                       "data": {"type": "array", "items": _ref("ModelObject")}}},
    "Envelope": {
        "type": "object", "required": ["api_version", "params"],
        "description": "brief 000's unified request: `model`, or `model_type` mapped to "
                       "a model by the admin API's model types (`model` wins)",
        "properties": {"api_version": {"const": "1.0"},
                       "model": MODEL_NAME,
                       "model_type": {"type": "string", "examples": ["nlp/sentiment"]},
                       "request_id": {"type": "string", "pattern": REQUEST_ID_RE.pattern},
                       "params": {"type": "object", "required": ["input"], "properties": {
                           "input": {"type": "array"}}}}},
    "EnvelopeAnswer": {
        "type": "object", "required": ["outputs"],
        "properties": {"api_version": {"type": "string"}, "request_id": {"type": "string"},
                       "model": {"type": "string"}, "model_type": {"type": "string"},
                       "outputs": {"type": "array"}, "usage": USAGE}},
    "InferRequest": {
        "type": "object", "required": ["input"],
        "properties": {"input": {"description": "one input, or a list of them"},
                       "params": {"type": "object"}}},
    "InferAnswer": {
        "type": "object", "required": ["output"],
        "properties": {"model": {"type": "string"},
                       "output": {"description": "a list when the input was one"},
                       "usage": USAGE}},
    "KServeV1Request": {
        "type": "object", "required": ["instances"],
        "properties": {"instances": {"type": "array"}, "parameters": {"type": "object"}}},
    "KServeV1Answer": {
        "type": "object", "required": ["predictions"],
        "properties": {"predictions": {"type": "array"}}},
    "V2Request": {
        "type": "object", "required": ["inputs"],
        "properties": {"id": {"type": "string"}, "parameters": {"type": "object"},
                       "inputs": {"type": "array", "minItems": 1, "items": {
                           "type": "object", "required": ["name", "shape", "datatype", "data"],
                           "properties": {"name": {"type": "string"},
                                          "shape": {"type": "array",
                                                    "items": {"type": "integer"}},
                                          "datatype": {"type": "string"},
                                          "data": {"type": "array"}}}}}},
    "V2Answer": {
        "type": "object", "required": ["outputs"],
        "properties": {"model_name": {"type": "string"}, "id": {"type": "string"},
                       "outputs": {"type": "array", "items": {"type": "object"}}}},
}

# Async jobs and the Batch API (docs/contracts.md, "Async jobs, webhooks and the Batch API")
_TIME = {"type": ["number", "null"], "description": "unix seconds"}
SCHEMAS.update({
    "Job": {"type": "object", "required": ["id", "object", "status"], "properties": {
        "id": {"type": "string"}, "object": {"const": "job"},
        "status": {"type": "string",
                   "enum": ["queued", "running", "succeeded", "failed", "cancelled"]},
        "model": {"type": ["string", "null"]}, "endpoint": {"type": "string"},
        "priority": {"type": "string", "enum": ["critical", "standard", "best_effort"]},
        "attempts": {"type": "integer"}, "created_at": _TIME, "started_at": _TIME,
        "finished_at": _TIME, "callback_url": {"type": ["string", "null"]},
        "result": {"type": "object", "description": "the gateway's answer, as a "
                   "synchronous call would have got it",
                   "properties": {"status_code": {"type": "integer"},
                                  "content_type": {"type": ["string", "null"]},
                                  "body": {}}},
        "error": {"type": "object", "description": "the error object of a failed answer"},
    }},
    "FileObject": {"type": "object", "required": ["id", "object", "bytes", "filename",
                                                  "purpose", "created_at", "status"],
                   "properties": {"id": {"type": "string"}, "object": {"const": "file"},
                                  "bytes": {"type": "integer"},
                                  "filename": {"type": "string"},
                                  "purpose": {"type": "string"},
                                  "created_at": {"type": "integer"},
                                  "status": {"type": "string"}}},
    "FileUpload": {"type": "object", "required": ["purpose", "file"], "properties": {
        "purpose": {"const": "batch"},
        "file": {"type": "string", "contentMediaType": "application/jsonl",
                 "description": "one request per line: {custom_id, method, url, body}"}}},
    "BatchCreate": {"type": "object", "required": ["input_file_id", "endpoint",
                                                   "completion_window"],
                    "properties": {"input_file_id": {"type": "string"},
                                   "endpoint": {"type": "string", "enum": [
                                       "/v1/chat/completions", "/v1/completions",
                                       "/v1/embeddings"]},
                                   "completion_window": {"const": "24h"},
                                   "metadata": {"type": ["object", "null"]}}},
    "Batch": {"type": "object", "required": ["id", "object", "status", "endpoint",
                                             "input_file_id", "request_counts"],
              "properties": {"id": {"type": "string"}, "object": {"const": "batch"},
                             "status": {"type": "string"},
                             "endpoint": {"type": "string"},
                             "input_file_id": {"type": "string"},
                             "output_file_id": {"type": ["string", "null"]},
                             "error_file_id": {"type": ["string", "null"]},
                             "request_counts": {"type": "object", "properties": {
                                 "total": {"type": "integer"},
                                 "completed": {"type": "integer"},
                                 "failed": {"type": "integer"}}}}},
})

HEADERS = {
    "X-Request-Id": {"description": "the request's id (the caller's when valid)",
                     "schema": {"type": "string"}},
    "X-RateLimit-Limit": {"description": "bucket capacity (consumers on a plan)",
                          "schema": {"type": "integer"}},
    "X-RateLimit-Remaining": {"description": "tokens left", "schema": {"type": "integer"}},
    "X-RateLimit-Reset": {"description": "seconds until the bucket is full",
                          "schema": {"type": "integer"}},
    "X-Cache-Status": {"description": "HIT, MISS or BYPASS on cacheable requests",
                       "schema": {"type": "string", "enum": ["HIT", "MISS", "BYPASS"]}},
}
ERROR_STATUSES = {
    "400": "malformed JSON, invalid UTF-8, a field of the wrong type or out of range "
           "(`param` names it), an impossible conversion",
    "401": "no credentials",
    "403": "invalid key or token, model not allowed",
    "404": "unknown model or endpoint, a model_type no model serves",
    "405": "wrong method",
    "413": "body too large",
    "429": "rate limit or quota (Retry-After header and retry_after)",
    "451": "content policy",
    "500": "internal error",
    "502": "backend error",
    "503": "no healthy backend, model loading, circuit open, queue full (retry_after)",
    "504": "backend timeout",
}
_COMMON_HEADERS = {name: {"$ref": f"#/components/headers/{name}"}
                   for name in ("X-Request-Id", "X-RateLimit-Limit", "X-RateLimit-Remaining",
                                "X-RateLimit-Reset")}


def _errors() -> dict[str, Any]:
    out = {}
    for status, why in ERROR_STATUSES.items():
        headers = {"X-Request-Id": {"$ref": "#/components/headers/X-Request-Id"}}
        if status in ("429", "503"):
            headers["Retry-After"] = {"description": "seconds",
                                      "schema": {"type": "integer"}}
        out[status] = {"description": why, "headers": headers,
                       "content": {JSON: {"schema": _ref("Error")}}}
    return out


def _ok(schema: str, *, stream: str | None = None, cache: bool = False) -> dict[str, Any]:
    content: dict[str, Any] = {JSON: {"schema": _ref(schema)}}
    if stream:
        content[SSE] = {"schema": {"type": "string",
                                   "description": f"with `stream: true`: `data: <{stream}>` "
                                                  "events, then `data: [DONE]`"}}
    headers = dict(_COMMON_HEADERS)
    if cache:
        headers["X-Cache-Status"] = {"$ref": "#/components/headers/X-Cache-Status"}
    return {"200": {"description": "OK", "headers": headers, "content": content},
            **_errors()}


_ASYNC_PARAMS = [
    {"name": "Prefer", "in": "header", "required": False,
     "schema": {"type": "string", "examples": ["respond-async"]},
     "description": "`respond-async`: answer 202 with a job at once; the answer comes by "
                    "GET /v1/jobs/{id} or the callback"},
    {"name": "X-Sluice-Callback-Url", "in": "header", "required": False,
     "schema": {"type": "string", "format": "uri"},
     "description": "with respond-async: POST the ended job here, signed "
                    "(X-Sluice-Signature: t=<unix>,v1=<HMAC-SHA256 hex>)"},
]
_ACCEPTED = {"description": "accepted as a job (Prefer: respond-async)",
             "headers": {"Location": {"description": "/v1/jobs/{id}",
                                      "schema": {"type": "string"}},
                         "X-Request-Id": {"$ref": "#/components/headers/X-Request-Id"}},
             "content": {JSON: {"schema": _ref("Job")}}}


def _post(op: str, summary: str, request: str, answer: str, *, path_model: bool = False,
          stream: str | None = None, cache: bool = False) -> dict[str, Any]:
    out = {"post": {"operationId": op, "summary": summary,
                    "parameters": _ASYNC_PARAMS,
                    "requestBody": {"required": True,
                                    "content": {JSON: {"schema": _ref(request)}}},
                    "responses": {**_ok(answer, stream=stream, cache=cache),
                                  "202": _ACCEPTED}}}
    out["parameters"] = [_MODEL_PARAM, _TRACEPARENT] if path_model else [_TRACEPARENT]
    return out


_ID = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]


def _plain(op: str, summary: str, answer: str, *, body: str | None = None,
           media: str = JSON) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": op, "summary": summary,
                           "responses": {**_errors(), "200": {
                               "description": "OK", "content": {
                                   media: {"schema": _ref(answer) if answer
                                           else {"type": "string"}}}}}}
    if body == "multipart":
        out["requestBody"] = {"required": True, "content": {
            "multipart/form-data": {"schema": _ref("FileUpload")}}}
    elif body:
        out["requestBody"] = {"required": True, "content": {JSON: {"schema": _ref(body)}}}
    return out


_MODEL_PARAM = {"name": "model", "in": "path", "required": True, "schema": MODEL_NAME}
_TRACEPARENT = {"name": "traceparent", "in": "header", "required": False,
                "description": "W3C trace context: a valid one is continued (the gateway's "
                               "span becomes the backend's parent), else a trace starts "
                               "at the gateway",
                "schema": {"type": "string", "examples": [
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]}}

PATHS: dict[str, Any] = {
    "/v1/chat/completions": _post(
        "chat", "OpenAI chat completions (streaming with `stream: true`)", "ChatRequest",
        "ChatCompletion", stream="ChatCompletionChunk", cache=True),
    "/v1/completions": _post("completions", "OpenAI completions", "CompletionRequest",
                             "Completion", stream="Completion", cache=True),
    "/v1/embeddings": _post("embeddings", "OpenAI embeddings (openai backends only)",
                            "EmbeddingRequest", "Embeddings"),
    "/v1/models": {"get": {"operationId": "list_models",
                           "summary": "the models (and route names) the key may use",
                           "responses": _ok("ModelList")}},
    "/v1/models/{model}": {"parameters": [_MODEL_PARAM],
                           "get": {"operationId": "get_model", "responses": _ok("ModelObject")}},
    "/v1/predict": _post("predict", "the unified envelope", "Envelope", "EnvelopeAnswer",
                         cache=True),
    "/api/v1/model/{model}/infer": _post("infer", "one input or a list, any model",
                                         "InferRequest", "InferAnswer", path_model=True,
                                         cache=True),
    "/v1/models/{model}/predict": _post("kserve_v1_predict", "KServe v1",
                                        "KServeV1Request", "KServeV1Answer",
                                        path_model=True, cache=True),
    "/v2/models/{model}/infer": _post("v2_infer", "Open Inference Protocol v2 tensors",
                                      "V2Request", "V2Answer", path_model=True, cache=True),
    "/v1/jobs/{id}": {"parameters": _ID,
                      "get": _plain("get_job", "an async job of this key's consumer", "Job"),
                      "delete": _plain("cancel_job", "cancel a queued job (409 otherwise)",
                                       "Job")},
    "/v1/files": {"post": _plain("upload_file", "OpenAI Files API: a batch's JSONL input",
                                 "FileObject", body="multipart")},
    "/v1/files/{id}": {"parameters": _ID,
                       "get": _plain("get_file", "a file of this key's consumer",
                                     "FileObject")},
    "/v1/files/{id}/content": {"parameters": _ID,
                               "get": _plain("file_content", "a file's bytes (JSONL)", "",
                                             media="application/jsonl")},
    "/v1/batches": {"post": _plain("create_batch", "OpenAI Batch API: one job per line",
                                   "Batch", body="BatchCreate")},
    "/v1/batches/{id}": {"parameters": _ID,
                         "get": _plain("get_batch", "a batch of this key's consumer",
                                       "Batch")},
    "/v1/batches/{id}/cancel": {"parameters": _ID,
                                "post": _plain("cancel_batch", "cancel a batch's queued "
                                               "lines", "Batch")},
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Sluice gateway API", "version": "1",
                 "description": "One front door for every model. Errors are "
                                "{\"error\": {\"code\", \"type\", \"message\", "
                                "\"retry_after\", \"request_id\"}}."},
        "security": [{"bearer": []}, {"apiKey": []}],
        "components": {
            "schemas": SCHEMAS,
            "headers": HEADERS,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "an API key, or a JWT (RS256 / ES256)"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}},
        "paths": PATHS,
    }


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else OUTPUT
    target.write_text(render())
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
