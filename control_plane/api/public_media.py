"""The audio and image part of the gateway's caller API (issue 25; docs/audio-and-
images.md) for the public OpenAPI document (public_openapi.py): their paths and
request and answer bodies, in OpenAI's shapes."""
from __future__ import annotations

from typing import Any

from control_plane.api.public_schemas import MODEL_NAME, _ref

_FORMATS = ["json", "text", "srt", "vtt", "verbose_json"]

SCHEMAS: dict[str, Any] = {
    "TranscriptionForm": {
        "type": "object", "required": ["file", "model"], "properties": {
            "file": {"type": "string", "contentMediaType": "audio/*",
                     "description": "the audio (audio/*, video/*, or a known extension)"},
            "model": MODEL_NAME,
            "language": {"type": "string"}, "prompt": {"type": "string"},
            "response_format": {"type": "string", "enum": _FORMATS},
            "temperature": {"type": "number"},
            "stream": {"type": "boolean", "description": "SSE transcript.text.delta events, "
                                                          "where the backend streams"}}},
    "Transcription": {
        "type": "object", "required": ["text"], "properties": {
            "text": {"type": "string"}, "language": {"type": "string"},
            "duration": {"type": "number"}, "segments": {"type": "array"},
            "usage": {"type": "object", "properties": {
                "type": {"const": "duration"}, "seconds": {"type": "number"}}}}},
    "SpeechRequest": {
        "type": "object", "required": ["model", "input"], "properties": {
            "model": MODEL_NAME, "input": {"type": "string"}, "voice": {"type": "string"},
            "response_format": {"type": "string"}, "speed": {"type": "number"}}},
    "ImageRequest": {
        "type": "object", "required": ["model", "prompt"], "properties": {
            "model": MODEL_NAME, "prompt": {"type": "string"},
            "n": {"type": "integer", "minimum": 1}, "size": {"type": "string"},
            "response_format": {"type": "string", "enum": ["b64_json", "url"]}}},
    "ImageEditForm": {
        "type": "object", "required": ["image", "model"], "properties": {
            "image": {"type": "string", "contentMediaType": "image/*"},
            "mask": {"type": "string", "contentMediaType": "image/png"},
            "model": MODEL_NAME, "prompt": {"type": "string"}, "n": {"type": "integer"},
            "size": {"type": "string"},
            "response_format": {"type": "string", "enum": ["b64_json", "url"]}}},
    "Images": {
        "type": "object", "required": ["data"], "properties": {
            "created": {"type": "integer"},
            "data": {"type": "array", "items": {"type": "object", "properties": {
                "b64_json": {"type": "string"}, "url": {"type": "string"}}}}}},
}


def paths(errors: dict[str, Any], traceparent: dict[str, Any]) -> dict[str, Any]:
    """The audio and image paths; `errors`: the error answers every path has."""
    def op(op_id: str, summary: str, request: dict[str, Any], answer: dict[str, Any]):
        return {"parameters": [traceparent], "post": {
            "operationId": op_id, "summary": summary,
            "requestBody": {"required": True, "content": request},
            "responses": {"200": {"description": "OK", "content": answer}, **errors}}}

    form = {"multipart/form-data": {"schema": _ref("TranscriptionForm")}}
    transcript = {"application/json": {"schema": _ref("Transcription")},
                  "text/plain": {"schema": {"type": "string",
                                            "description": "text, srt or vtt"}},
                  "text/event-stream": {"schema": {"type": "string"}}}
    images = {"application/json": {"schema": _ref("Images")}}
    return {
        "/v1/audio/transcriptions": op("transcriptions", "OpenAI transcriptions (multipart "
                                       "upload; model in the form or ?model=)", form,
                                       transcript),
        "/v1/audio/translations": op("translations", "OpenAI translations (multipart)", form,
                                     transcript),
        "/v1/audio/speech": op("speech", "OpenAI speech: the audio, streamed as made",
                               {"application/json": {"schema": _ref("SpeechRequest")}},
                               {"audio/*": {"schema": {"type": "string",
                                                       "contentMediaType": "audio/*"}}}),
        "/v1/images/generations": op("images", "OpenAI image generation",
                                     {"application/json": {"schema": _ref("ImageRequest")}},
                                     images),
        "/v1/images/edits": op("image_edits", "OpenAI image edits (multipart image, mask)",
                               {"multipart/form-data": {"schema": _ref("ImageEditForm")}},
                               images),
    }
