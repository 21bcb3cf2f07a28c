"""The OpenAPI 3.1 document of the gateway's caller API (docs/contracts.md, "Public
gateway API"; lua/sluice/endpoints.lua), built here.

    python -m control_plane.api.public_openapi      # rewrites docs/public-openapi.json

tests/unit/test_public_openapi.py checks that the file is this document and valid.
Unknown request fields pass through to the backends, so request bodies stay open
(`additionalProperties` is not false); the fields listed are the ones Sluice reads.
The request and answer bodies (components/schemas) are in public_schemas.py; this
module holds the paths, headers and error answers.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from control_plane.api import public_anthropic, public_media
from control_plane.api.public_schemas import MODEL_NAME, SCHEMAS, _ref

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "public-openapi.json"
JSON = "application/json"
SSE = "text/event-stream"

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

# a kept response's paths (lua/sluice/stored.lua): counted by the plan as requests
_KEPT = _ID + [
    {"name": "model", "in": "query", "required": False, "schema": MODEL_NAME,
     "description": "the model whose backend kept it; needed only when several "
                    "models of the key speak Responses natively"}]

PATHS: dict[str, Any] = {
    "/v1/chat/completions": _post(
        "chat", "OpenAI chat completions (streaming with `stream: true`)", "ChatRequest",
        "ChatCompletion", stream="ChatCompletionChunk", cache=True),
    "/v1/completions": _post("completions", "OpenAI completions", "CompletionRequest",
                             "Completion", stream="Completion", cache=True),
    "/v1/embeddings": _post("embeddings", "OpenAI embeddings (openai backends only)",
                            "EmbeddingRequest", "Embeddings"),
    "/v1/responses": _post(
        "responses", "OpenAI Responses API, converted to chat backends or passed to "
        "openai_responses backends (docs/responses-api.md); with `stream: true` "
        "`event:`/`data:` ResponseStreamEvent events, no [DONE]", "ResponsesRequest",
        "Response"),
    "/v1/responses/{id}": {"parameters": _KEPT,
        "get": _plain("get_response", "a response an openai_responses backend kept",
                      "Response"),
        "delete": _plain("delete_response", "delete it in the backend that kept it",
                         "ResponseDeleted")},
    "/v1/responses/{id}/input_items": {"parameters": _KEPT + [
        {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer"}},
        {"name": "order", "in": "query", "required": False,
         "schema": {"enum": ["asc", "desc"]}},
        {"name": "after", "in": "query", "required": False, "schema": {"type": "string"}}],
        "get": _plain("list_response_input_items", "its input items, listed by the backend "
                      "that kept it (the query passed on)", "ResponseInputItems")},
    "/v1/responses/{id}/cancel": {"parameters": _KEPT,
        "post": _plain("cancel_response", "cancel a background response in the backend "
                       "that kept it (no body)", "Response")},
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
    "/v1/realtime": {"get": {
        "operationId": "realtime",
        "summary": "OpenAI Realtime API: a WebSocket (HTTP/1.1 upgrade) proxied event by "
                   "event to the model's openai_realtime backends (docs/realtime.md); a "
                   "browser may give the key as the subprotocol "
                   "openai-insecure-api-key.<key>",
        "parameters": [{"name": "model", "in": "query", "required": True,
                        "schema": MODEL_NAME}],
        "responses": {**_errors(),
                      "101": {"description": "Switching Protocols: the session"}}}},
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
    **public_anthropic.paths(_errors()),
}


PATHS.update(public_media.paths(_errors(), _TRACEPARENT))   # audio and images


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Sluice gateway API", "version": "1",
                 "description": "One front door for every model. Errors are "
                                "{\"error\": {\"code\", \"type\", \"message\", "
                                "\"retry_after\", \"request_id\"}}."},
        "security": [{"bearer": []}, {"apiKey": []}],
        "components": {
            "schemas": {**SCHEMAS, **public_anthropic.SCHEMAS, **public_media.SCHEMAS},
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
