"""The Anthropic Messages API of the caller API document (docs/public-openapi.json;
docs/anthropic.md): its request and answer bodies, its stream events and its error
shape, for public_openapi.py. Errors on these paths are Anthropic's
`{"type": "error", "error": {...}, "request_id"}`, the template's fields kept inside."""
from __future__ import annotations

from typing import Any

from control_plane.api.errors import REQUEST_ID_RE
from control_plane.tables.config import NAME_PATTERN

JSON = "application/json"
SSE = "text/event-stream"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


BLOCK_TYPES = ["text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"]
BLOCK = {
    "type": "object", "required": ["type"],
    "description": "a content block; tool_use and thinking only in assistant turns, "
                   "tool_result only in user turns, answering an earlier tool_use",
    "properties": {
        "type": {"enum": BLOCK_TYPES},
        "text": {"type": "string"},
        "source": {"type": "object", "properties": {
            "type": {"enum": ["base64", "url"]},
            "media_type": {"enum": ["image/jpeg", "image/png", "image/gif", "image/webp"]},
            "data": {"type": "string", "description": "base64, at most 5 MB decoded"},
            "url": {"type": "string"}}},
        "id": {"type": "string"}, "name": {"type": "string"}, "input": {"type": "object"},
        "tool_use_id": {"type": "string"},
        "content": {"anyOf": [{"type": "string"}, {"type": "array"}]},
        "is_error": {"type": "boolean"}},
}
USAGE = {"type": "object", "required": ["input_tokens", "output_tokens"], "properties": {
    "input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"}}}
_MESSAGES = {"type": "array", "minItems": 1, "items": {
    "type": "object", "required": ["role", "content"],
    "properties": {"role": {"enum": ["user", "assistant"]},
                   "content": {"anyOf": [{"type": "string"},
                                         {"type": "array", "items": BLOCK}]}}}}
_SYSTEM = {"anyOf": [{"type": "string"}, {"type": "array", "items": {
    "type": "object", "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}]}
_TOOLS = {"type": "array", "items": {
    "type": "object", "required": ["name"],
    "properties": {"name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                   "description": {"type": "string"},
                   "input_schema": {"type": "object"}}}}
_TOOL_CHOICE = {"type": "object", "required": ["type"], "properties": {
    "type": {"enum": ["auto", "any", "none", "tool"]}, "name": {"type": "string"},
    "disable_parallel_tool_use": {"type": "boolean"}}}

SCHEMAS: dict[str, Any] = {
    "AnthropicError": {
        "type": "object", "required": ["type", "error", "request_id"],
        "properties": {
            "type": {"const": "error"},
            "error": {"type": "object", "required": ["type", "message", "code"],
                      "properties": {
                          "type": {"type": "string", "examples": [
                              "invalid_request_error", "authentication_error",
                              "permission_error", "not_found_error", "request_too_large",
                              "rate_limit_error", "api_error", "overloaded_error"]},
                          "message": {"type": "string"},
                          "code": {"type": "integer", "description": "the HTTP status"},
                          "sluice_type": {"type": "string",
                                          "description": "the error template's type"},
                          "param": {"type": ["string", "null"]},
                          "retry_after": {"type": "integer", "minimum": 0}}},
            "request_id": {"type": "string", "pattern": REQUEST_ID_RE.pattern}}},
    "MessagesRequest": {
        "type": "object", "required": ["model", "max_tokens", "messages"],
        "properties": {
            "model": {"type": "string", "pattern": NAME_PATTERN},
            "max_tokens": {"type": "integer", "minimum": 1,
                           "description": "at most the model's max_output_tokens"},
            "messages": _MESSAGES, "system": _SYSTEM, "tools": _TOOLS,
            "tool_choice": _TOOL_CHOICE,
            "stop_sequences": {"type": "array", "items": {"type": "string"}},
            "temperature": {"type": "number", "minimum": 0, "maximum": 1},
            "top_p": {"type": "number", "minimum": 0, "maximum": 1},
            "top_k": {"type": "integer", "minimum": 0},
            "stream": {"type": "boolean", "default": False},
            "metadata": {"type": "object", "properties": {"user_id": {"type": "string"}}}}},
    "Message": {
        "type": "object", "required": ["id", "type", "role", "content", "stop_reason", "usage"],
        "properties": {
            "id": {"type": "string"}, "type": {"const": "message"},
            "role": {"const": "assistant"}, "model": {"type": "string"},
            "content": {"type": "array", "items": BLOCK},
            "stop_reason": {"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use",
                                     "refusal", "pause_turn"]},
            "stop_sequence": {"type": ["string", "null"]},
            "usage": USAGE}},
    "MessageStreamEvent": {
        "type": "object", "required": ["type"],
        "description": "one event (`event: <type>` and `data: <this>`), in the order "
                       "message_start, per block content_block_start, content_block_delta "
                       "(text_delta, input_json_delta), content_block_stop; message_delta "
                       "(stop_reason, usage), message_stop; `error` after a failure",
        "properties": {"type": {"enum": [
            "message_start", "content_block_start", "content_block_delta",
            "content_block_stop", "message_delta", "message_stop", "ping", "error"]}}},
    "CountTokensRequest": {
        "type": "object", "required": ["model", "messages"],
        "properties": {"model": {"type": "string", "pattern": NAME_PATTERN},
                       "messages": _MESSAGES, "system": _SYSTEM, "tools": _TOOLS}},
    "TokenCount": {"type": "object", "required": ["input_tokens"],
                   "properties": {"input_tokens": {"type": "integer", "description":
                                  "the gateway's estimate: a token per 4 bytes"}}},
}

_VERSION = {"name": "anthropic-version", "in": "header", "required": False,
            "schema": {"type": "string", "examples": ["2023-06-01"]},
            "description": "accepted; passed to an `anthropic` backend (2023-06-01 when absent)"}


def _operation(op: str, summary: str, request: str, answer: str, errors: dict,
               stream: bool) -> dict[str, Any]:
    content: dict[str, Any] = {JSON: {"schema": _ref(answer)}}
    if stream:
        content[SSE] = {"schema": {"type": "string", "description":
                                   "with `stream: true`: MessageStreamEvent events"}}
    anthropic_errors = {status: {**e, "content": {JSON: {"schema": _ref("AnthropicError")}}}
                        for status, e in errors.items()}
    return {"post": {"operationId": op, "summary": summary, "parameters": [_VERSION],
                     "requestBody": {"required": True,
                                     "content": {JSON: {"schema": _ref(request)}}},
                     "responses": {"200": {"description": "OK", "content": content},
                                   **anthropic_errors}}}


def paths(errors: dict) -> dict[str, Any]:
    """The Messages API's paths, with the error statuses `errors` (public_openapi's)."""
    return {
        "/v1/messages": _operation(
            "messages", "Anthropic Messages (x-api-key or Bearer; streaming with "
            "`stream: true`)", "MessagesRequest", "Message", errors, True),
        "/v1/messages/count_tokens": _operation(
            "count_tokens", "the gateway's token estimate of a Messages request",
            "CountTokensRequest", "TokenCount", errors, False),
    }
