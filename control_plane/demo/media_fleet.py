"""The audio and image part of the demo fleet `sluice up` starts (control_plane/demo/
fleet.py loads it with the rest): brief 000's case, and OpenAI's audio and image
endpoints, on demo backends that do the work for real (control_plane/demo/media.py).

- `asr-demo`: one public ASR model, three vendors of three shapes behind it, weighted
  4:3:3 (sluice.spread; an open circuit's share goes to the others): an
  OpenAI-compatible server (multipart), `asr-json` (base64 audio in JSON with
  {"lang": "zh"}) and `asr-raw` (the WAV as the body, the language in the query,
  {"result": [{"transcript", "confidence"}]}); the caller gets OpenAI's answer shape
  in any `response_format` whichever served it. Uploads up to 100 MiB.
- `tts-demo`: speech as a real WAV, streamed; `tts-vendor`: a vendor whose JSON answer
  carries base64 audio, sent on as bytes.
- `image-demo`: real PNGs from /v1/images/generations and /edits.
- `ocr-demo`: an image-recognition vendor for brief 000's `cv/ocr`.
- model types for brief 000's envelope: `asr/zh`, `tts/zh`, `cv/ocr`.
"""
from __future__ import annotations

from typing import Any

MAPPINGS: list[dict[str, Any]] = [
    {"name": "asr-json", "path": "/asr/recognize",
     "request": {"audio": "{{file}}", "lang": "zh"},
     "response": {"output": "/data/text", "duration": "/data/duration", "error": "/message"},
     "transport": {"upload": "json"}},
    {"name": "asr-raw", "path": "/v1/recognize", "request": {},
     "response": {"output": "/result/0/transcript", "error": "/error_msg"},
     "transport": {"upload": "raw", "content_type": "audio/wav",
                   "query": {"lang": "{{params.language}}"}, "defaults": {"language": "zh"}}},
    {"name": "tts-json", "path": "/tts",
     "request": {"text": "{{input}}", "speaker": "{{params.voice}}"},
     "response": {"output": "/audio", "audio": "/audio", "audio_type": "audio/wav",
                  "error": "/reason"}},
    {"name": "ocr-json", "path": "/ocr", "request": {"image": "{{input}}"},
     "response": {"output": "/text"}},
]
MODELS: list[dict[str, Any]] = [
    {"name": "asr-demo", "timeout_ms": 30000, "media_tasks": ["transcription", "translation"],
     "max_request_bytes": 100 * 1024 * 1024},
    {"name": "tts-demo", "timeout_ms": 30000, "media_tasks": ["speech"]},
    {"name": "tts-vendor", "timeout_ms": 30000, "media_tasks": ["speech"]},
    {"name": "image-demo", "timeout_ms": 30000, "media_tasks": ["image"]},
    {"name": "ocr-demo", "timeout_ms": 30000},
]
# "serves": the demo backend's own protocol (media.py), when the gateway speaks a
# vendor mapping to it
BACKENDS: list[dict[str, Any]] = [
    {"name": "asr-demo-openai", "model": "asr-demo", "protocol": "openai", "weight": 400},
    {"name": "asr-demo-json", "model": "asr-demo", "protocol": "vendor", "weight": 300,
     "mapping": "asr-json", "serves": "asr-json"},
    {"name": "asr-demo-raw", "model": "asr-demo", "protocol": "vendor", "weight": 300,
     "mapping": "asr-raw", "serves": "asr-raw"},
    {"name": "tts-demo-a", "model": "tts-demo", "protocol": "openai", "weight": 100},
    {"name": "tts-vendor-a", "model": "tts-vendor", "protocol": "vendor", "weight": 100,
     "mapping": "tts-json", "serves": "tts-json"},
    {"name": "image-demo-a", "model": "image-demo", "protocol": "openai", "weight": 100},
    {"name": "ocr-demo-a", "model": "ocr-demo", "protocol": "vendor", "weight": 100,
     "mapping": "ocr-json", "serves": "ocr-json"},
]
MODEL_TYPES = {"asr/zh": "asr-demo", "tts/zh": "tts-vendor", "cv/ocr": "ocr-demo"}
# what var/sluice-up.json names
UP_KEYS = {"demo_asr_model": "asr-demo", "demo_tts_model": "tts-demo",
           "demo_image_model": "image-demo"}


def seed_mappings(admin) -> dict[str, int]:
    """Create or update the demo mappings; their ids by name."""
    return {m["name"]: admin.upsert("mappings", m["name"],
                                    **{k: v for k, v in m.items() if k != "name"})["id"]
            for m in MAPPINGS}
