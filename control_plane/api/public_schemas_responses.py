"""The JSON Schemas of POST /v1/responses (the OpenAI Responses API) and its answers,
for docs/public-openapi.json (public_schemas.py adds them to its SCHEMAS). What
converts to which backend, and what is a 400: docs/responses-api.md."""
from __future__ import annotations

from typing import Any

from control_plane.tables.config import NAME_PATTERN

_PART = {"type": "object", "required": ["type"], "properties": {
    "type": {"enum": ["input_text", "input_image", "input_file", "output_text", "refusal"]},
    "text": {"type": "string"}, "image_url": {"type": "string"},
    "file_data": {"type": "string"}, "filename": {"type": "string"},
    "detail": {"enum": ["low", "high", "auto"]}}}
_ITEM = {"type": "object", "description": "a message (role and content), or a "
         "function_call / function_call_output item", "properties": {
             "type": {"enum": ["message", "function_call", "function_call_output",
                               "reasoning", "item_reference"]},
             "role": {"enum": ["user", "assistant", "system", "developer"]},
             "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": _PART}]},
             "call_id": {"type": "string"}, "name": {"type": "string"},
             "arguments": {"type": "string", "description": "JSON text"},
             "output": {"anyOf": [{"type": "string"}, {"type": "array"}]}}}
_TOOL = {"type": "object", "required": ["type"], "properties": {
    "type": {"type": "string", "description": "`function`; other types only to "
             "backends that speak Responses natively"},
    "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
    "description": {"type": "string"}, "parameters": {"type": "object"},
    "strict": {"type": "boolean"}}}
_OUTPUT = {"type": "object", "required": ["type"], "properties": {
    "type": {"type": "string", "examples": ["message", "function_call"]},
    "id": {"type": "string"}, "status": {"type": "string"}, "role": {"const": "assistant"},
    "content": {"type": "array", "items": {"type": "object", "properties": {
        "type": {"const": "output_text"}, "text": {"type": "string"}}}},
    "call_id": {"type": "string"}, "name": {"type": "string"},
    "arguments": {"type": "string"}}}
_USAGE = {"type": "object", "properties": {
    "input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"},
    "total_tokens": {"type": "integer"}}}

SCHEMAS: dict[str, Any] = {
    "ResponsesRequest": {
        "type": "object", "required": ["model", "input"], "properties": {
            "model": {"type": "string", "pattern": NAME_PATTERN},
            "input": {"anyOf": [{"type": "string"},
                                {"type": "array", "minItems": 1, "items": _ITEM}]},
            "instructions": {"type": "string"},
            "tools": {"type": "array", "items": _TOOL},
            "tool_choice": {"anyOf": [{"enum": ["none", "auto", "required"]},
                                      {"type": "object", "required": ["type"]}]},
            "max_output_tokens": {"type": "integer", "minimum": 1,
                                  "description": "at most the model's max_output_tokens"},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
            "top_p": {"type": "number", "minimum": 0, "maximum": 1},
            "parallel_tool_calls": {"type": "boolean"},
            "metadata": {"type": "object", "maxProperties": 16,
                         "additionalProperties": {"type": "string", "maxLength": 512}},
            "stream": {"type": "boolean", "default": False},
            "store": {"type": "boolean", "description": "kept only by backends that "
                      "speak Responses natively; converted answers say `store: false`"},
            "previous_response_id": {"type": "string", "description": "only to backends "
                                     "that speak Responses natively (else a 400 naming it)"},
            "text": {"type": "object", "properties": {"format": {"type": "object"}}},
        }},
    "Response": {
        "type": "object", "required": ["id", "object", "status", "output"], "properties": {
            "id": {"type": "string"}, "object": {"const": "response"},
            "created_at": {"type": "number"}, "model": {"type": "string"},
            "status": {"enum": ["completed", "incomplete", "in_progress", "failed",
                                "queued", "cancelled"]},
            "output": {"type": "array", "items": _OUTPUT},
            "usage": {"anyOf": [_USAGE, {"type": "null"}]},
            "metadata": {"type": ["object", "null"]},
            "store": {"type": "boolean"},
        }},
    "ResponseDeleted": {
        "type": "object", "required": ["id", "object", "deleted"], "properties": {
            "id": {"type": "string"}, "object": {"const": "response.deleted"},
            "deleted": {"const": True}}},
    "ResponseInputItems": {
        "type": "object", "required": ["object", "data"], "properties": {
            "object": {"const": "list"}, "data": {"type": "array", "items": _ITEM},
            "first_id": {"type": ["string", "null"]}, "last_id": {"type": ["string", "null"]},
            "has_more": {"type": "boolean"}}},
    "ResponseStreamEvent": {
        "type": "object", "required": ["type", "sequence_number"],
        "description": "one `event: <type>` / `data: <json>` event: response.created, "
                       "response.in_progress, response.output_item.added, "
                       "response.content_part.added, response.output_text.delta ..., "
                       "response.output_text.done, response.content_part.done, "
                       "response.function_call_arguments.delta ... / .done, "
                       "response.output_item.done, response.completed (with usage)",
        "properties": {"type": {"type": "string"}, "sequence_number": {"type": "integer"}}},
}
