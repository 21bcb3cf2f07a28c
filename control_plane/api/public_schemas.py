"""The JSON Schemas of the gateway's caller API: the request and answer bodies of
docs/public-openapi.json (its components/schemas), for public_openapi.py, which builds
the document around them.
"""
from __future__ import annotations

from typing import Any

from control_plane.api import public_schemas_responses
from control_plane.api.errors import REQUEST_ID_RE
from control_plane.tables.config import NAME_PATTERN


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

# The Responses API (public_schemas_responses.py)
SCHEMAS.update(public_schemas_responses.SCHEMAS)
