"""What the admin API accepts for audio and image work (issue 25): a model's
`media_tasks`, and a vendor mapping's `transport` (how an upload travels) and the
audio and image pointers of its `response` (lua/sluice/media_mapping.lua reads them)."""
from __future__ import annotations

import re
from typing import Any

from control_plane.api import validation as v
from control_plane.api.validation import Field, described
from control_plane.tables.config import MEDIA_TASKS, PLAN_CAPS

_POINTER = r"^(/([^~/]|~[01])*)*$"
_POINTER_RE = re.compile(_POINTER)
RESPONSE_POINTERS = ("output", "error", "duration", "audio", "image")
UPLOADS = ("json", "raw", "multipart")
# a plan's daily caps on audio and image work (lua/sluice/media_caps.lua); null: none
PLAN_CAP_FIELDS = {name: Field(v.integer(1, 2**53), nullable=True) for name in PLAN_CAPS}
_TEMPLATE = {"type": "object", "maxProperties": 32,
             "additionalProperties": {"type": ["string", "number"]}}


@described({"type": "array", "items": {"type": "string", "enum": list(MEDIA_TASKS)}})
def media_tasks(value: Any) -> list[str]:
    """The audio and image work a model does, e.g. ["transcription", "translation"]."""
    if not isinstance(value, list) or not all(t in MEDIA_TASKS for t in value):
        raise ValueError("must be null or a list of: " + ", ".join(MEDIA_TASKS))
    return list(dict.fromkeys(value))


@described({"type": "object", "required": ["output"], "additionalProperties": False,
            "properties": {**{k: {"type": "string", "pattern": _POINTER}
                              for k in RESPONSE_POINTERS},
                           "audio_type": {"type": "string", "maxLength": 128}}})
def mapping_response(value: Any) -> dict[str, str]:
    """{"output": pointer, "error"?, "duration"?, "audio"?, "image"?: pointers,
    "audio_type"?: a Content-Type}."""
    message = ('must be an object {"output": "/json/pointer", ...} with RFC 6901 JSON '
               "pointers at " + ", ".join(RESPONSE_POINTERS) + " and an audio_type string")
    if not isinstance(value, dict) or "output" not in value or \
            not set(value) <= {*RESPONSE_POINTERS, "audio_type"}:
        raise ValueError(message)
    for k, ptr in value.items():
        ok = isinstance(ptr, str) and (len(ptr) <= 128 if k == "audio_type"
                                       else _POINTER_RE.match(ptr) is not None)
        if not ok:
            raise ValueError(message)
    return value


def _template(value: Any) -> bool:
    return isinstance(value, dict) and len(value) <= 32 and all(
        isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
        for k, v in value.items())


@described({"type": "object", "additionalProperties": False, "properties": {
    "upload": {"type": "string", "enum": list(UPLOADS)},
    "field": {"type": "string", "maxLength": 128},
    "content_type": {"type": "string", "maxLength": 128},
    "query": _TEMPLATE, "headers": _TEMPLATE, "defaults": _TEMPLATE}})
def mapping_transport(value: Any) -> dict[str, Any]:
    """How an upload reaches the vendor: {"upload": "json" | "raw" | "multipart",
    "field", "content_type", "query", "headers", "defaults"} (all optional)."""
    keys = {"upload", "field", "content_type", "query", "headers", "defaults"}
    if not isinstance(value, dict) or not set(value) <= keys:
        raise ValueError("must be an object of: " + ", ".join(sorted(keys)))
    if "upload" in value and value["upload"] not in UPLOADS:
        raise ValueError("upload must be one of: " + ", ".join(UPLOADS))
    for k in ("field", "content_type"):
        if k in value and not (isinstance(value[k], str) and 0 < len(value[k]) <= 128):
            raise ValueError(f"{k} must be a string of 1-128 characters")
    for k in ("query", "headers", "defaults"):
        if k in value and not _template(value[k]):
            raise ValueError(f"{k} must be an object of at most 32 strings or numbers")
    return value


def plan_caps(plan: Any) -> dict[str, Any]:
    """A plan's caps as the admin API shows them."""
    return {name: getattr(plan, name) for name in PLAN_CAPS}
