"""The demo backends' audio and image work: real files, no model weights.

On the ``openai`` protocol (OpenAI's own endpoints and shapes):

- ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` (multipart ``file``,
  ``model``, ``language``, ``prompt``, ``response_format`` json | text | srt | vtt |
  verbose_json, ``stream``): the transcript is derived from the audio itself,
  ``"<duration> seconds of audio, crc32 <checksum>"`` (duration from a WAV header,
  else 16 kHz 16-bit mono); ``usage`` reports the seconds. ``stream=true``: SSE events
  ``transcript.text.delta`` per word, then ``transcript.text.done``.
- ``POST /v1/audio/speech`` (JSON ``input``, ``voice``, ``response_format``, ``speed``):
  a real WAV (``audio/wav``; ``pcm``: the raw samples) of 60 ms per input character at
  ``speed`` 1, sent chunked, 100 ms of audio a chunk, as it is "synthesised".
- ``POST /v1/images/generations`` (JSON ``prompt``, ``n``, ``size``,
  ``response_format`` b64_json | url) and ``/v1/images/edits`` (multipart ``image``,
  optional ``mask``): real PNGs (at most 64x64) coloured by a hash of the prompt
  (and the image); ``url`` answers are ``data:`` URLs.

Two ASR vendors of their own shapes (brief 000), the same transcript as above:

- ``asr-json``: ``POST /asr/recognize`` ``{"audio": <base64>, "lang": "zh"}`` (``lang``
  required) answers ``{"code": 0, "data": {"text": ..., "duration": s}}``.
- ``asr-raw``: ``POST /v1/recognize?lang=zh`` with the audio as the body
  (``audio/wav``) answers ``{"result": [{"transcript": ..., "confidence": 0.93}],
  "duration": s}``.

And a TTS vendor whose answer carries the audio in base64 inside JSON:

- ``tts-json``: ``POST /tts`` ``{"text": ..., "speaker": ...}`` answers
  ``{"status": "ok", "audio": <base64 WAV>}``, the same WAV as ``/v1/audio/speech``.

And an image-recognition vendor (brief 000's ``cv/ocr``):

- ``ocr-json``: ``POST /ocr`` ``{"image": <base64 PNG>}`` answers
  ``{"text": "<width>x<height> PNG, crc32 <checksum>"}``.

And an image vendor: ``img-json``: ``POST /draw`` ``{"prompt": ..., "image": <base64,
optional>}`` answers ``{"images": [<base64 PNG>]}``, the PNG ``/v1/images/*`` would
make of the same prompt and image.
"""
from __future__ import annotations

import base64
import hashlib
import json
import struct
import time
import zlib
from urllib.parse import parse_qs

PROTOCOLS = ("asr-json", "asr-raw", "tts-json", "ocr-json", "img-json")
MAX_UPLOAD = 256 * 1024 * 1024
RATE = 16000                 # samples per second of the WAVs made here (16-bit mono)
MS_PER_CHAR = 60
CHUNK_MS = 100


class BadRequest(Exception):
    """Answered 400 in the backend's own error shape."""


# ---- audio ------------------------------------------------------------------------

def duration(audio: bytes) -> float:
    """Seconds of audio: from a RIFF/WAVE header's byte rate, else 16 kHz 16-bit mono."""
    if audio[:4] == b"RIFF" and audio[8:12] == b"WAVE":
        pos, rate, data = 12, 0, None
        while pos + 8 <= len(audio):
            cid, size = audio[pos:pos + 4], struct.unpack("<I", audio[pos + 4:pos + 8])[0]
            if cid == b"fmt " and size >= 16:
                rate = struct.unpack("<I", audio[pos + 16:pos + 20])[0]
            elif cid == b"data":
                data = min(size, len(audio) - pos - 8)
                break
            pos += 8 + size + (size & 1)
        if rate and data is not None:
            return data / rate
    return len(audio) / (RATE * 2)


def transcript(audio: bytes) -> tuple[str, float]:
    """The demo's transcript of `audio` and its duration."""
    seconds = round(duration(audio), 3)
    return f"{seconds:.2f} seconds of audio, crc32 {zlib.crc32(audio):08x}", seconds


def wav(seconds: float, seed: str) -> bytes:
    """A real 16 kHz mono WAV of `seconds`, a tone whose pitch follows `seed`."""
    n = int(seconds * RATE)
    pitch = 200 + int(hashlib.sha256(seed.encode()).hexdigest()[:4], 16) % 600
    period = max(2, RATE // pitch)
    samples = bytearray()
    wave_ = [int(8000 * ((i % period) / period * 2 - 1)) for i in range(period)]
    cycle = struct.pack(f"<{period}h", *wave_)
    while len(samples) < 2 * n:
        samples += cycle
    return wav_header(2 * n) + bytes(samples[:2 * n])


def wav_header(data_len: int) -> bytes:
    return (b"RIFF" + struct.pack("<I", 36 + data_len) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, RATE, RATE * 2, 2, 16)
            + b"data" + struct.pack("<I", data_len))


def subtitles(text: str, seconds: float, vtt: bool) -> str:
    def stamp(s: float) -> str:
        h, rem = divmod(s, 3600)
        m, sec = divmod(rem, 60)
        sep = "." if vtt else ","
        return f"{int(h):02d}:{int(m):02d}:{int(sec):02d}{sep}{int(round(sec % 1 * 1000)):03d}"
    cue = f"{stamp(0)} --> {stamp(seconds)}\n{text}\n"
    return ("WEBVTT\n\n" + cue) if vtt else ("1\n" + cue)


# ---- images -------------------------------------------------------------------------

def png(width: int, height: int, seed: bytes) -> bytes:
    """A real PNG, `width` x `height` RGB, a gradient coloured by `seed`."""
    h = hashlib.sha256(seed).digest()
    rows = b"".join(b"\0" + bytes(
        v for x in range(width) for v in ((h[0] + x * 4) & 255, (h[1] + y * 4) & 255, h[2]))
        for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                            0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def image_size(size) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in str(size or "64x64").lower().split("x"))
    except ValueError:
        raise BadRequest(f"size must be WIDTHxHEIGHT, not {size!r}") from None
    return max(1, min(w, 64)), max(1, min(h, 64))


def image_answer(prompt: str, seed: bytes, n, size, response_format) -> dict:
    w, h = image_size(size)
    n = n if isinstance(n, int) and 1 <= n <= 4 else 1
    data = []
    for i in range(n):
        b64 = base64.b64encode(png(w, h, seed + prompt.encode() + bytes([i]))).decode()
        data.append({"url": "data:image/png;base64," + b64} if response_format == "url"
                    else {"b64_json": b64, "revised_prompt": prompt})
    return {"created": int(time.time()), "data": data,
            "usage": {"images": n}}


# ---- multipart ------------------------------------------------------------------------

def form(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """A multipart/form-data body as {name: (filename or None, bytes)} (first wins)."""
    marker = "boundary="
    at = content_type.find(marker)
    if not content_type.lower().startswith("multipart/form-data") or at < 0:
        raise BadRequest("the request must be multipart/form-data")
    boundary = content_type[at + len(marker):].split(";")[0].strip().strip('"').encode()
    out: dict[str, tuple[str | None, bytes]] = {}
    for part in body.split(b"--" + boundary)[1:]:
        if part.startswith(b"--"):
            break
        head, _, data = part[2:].partition(b"\r\n\r\n")
        name = filename = None
        for line in head.decode("utf-8", "replace").split("\r\n"):
            if line.lower().startswith("content-disposition:"):
                for item in line.split(";")[1:]:
                    k, _, v = item.strip().partition("=")
                    if k == "name":
                        name = v.strip('"')
                    elif k == "filename":
                        filename = v.strip('"')
        if name and name not in out:
            out[name] = (filename, data[:-2] if data.endswith(b"\r\n") else data)
    return out


def text_field(fields, name: str, default: str | None = None) -> str | None:
    v = fields.get(name)
    return v[1].decode("utf-8", "replace") if v else default


# ---- handlers -------------------------------------------------------------------------

def route(protocol: str, path: str):
    """The handler of POST `path` on a `protocol` backend, or None."""
    if protocol == "openai":
        return {"/v1/audio/transcriptions": transcriptions,
                "/v1/audio/translations": transcriptions,
                "/v1/audio/speech": speech,
                "/v1/images/generations": generations,
                "/v1/images/edits": edits}.get(path)
    if protocol == "asr-json" and path == "/asr/recognize":
        return asr_json
    if protocol == "asr-raw" and path == "/v1/recognize":
        return asr_raw
    if protocol == "tts-json" and path == "/tts":
        return tts_json
    if protocol == "ocr-json" and path == "/ocr":
        return ocr_json
    if protocol == "img-json" and path == "/draw":
        return img_json
    return None


def transcriptions(h, body: bytes, query: str) -> None:
    fields = form(h.headers.get("Content-Type", ""), body)
    if "file" not in fields or fields["file"][0] is None:
        raise BadRequest("a file part named 'file' is required")
    text, seconds = transcript(fields["file"][1])
    fmt = text_field(fields, "response_format", "json")
    if text_field(fields, "stream") == "true":
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h._demo_headers()
        h.end_headers()
        for word in text.split(" "):
            h._write_chunk(b"data: " + json.dumps({"type": "transcript.text.delta",
                                                   "delta": word + " "}).encode() + b"\n\n")
        h._write_chunk(b"data: " + json.dumps({"type": "transcript.text.done", "text": text,
                       "usage": {"type": "duration", "seconds": seconds}}).encode() + b"\n\n")
        h._write_chunk(b"")
        return
    if fmt in ("text", "srt", "vtt"):
        out = text + "\n" if fmt == "text" else subtitles(text, seconds, fmt == "vtt")
        send(h, 200, "text/plain; charset=utf-8", out.encode())
        return
    usage = {"type": "duration", "seconds": seconds}
    if fmt == "verbose_json":
        h._send_json(200, {"task": "transcribe", "language": text_field(fields, "language", "en"),
                           "duration": seconds, "text": text, "usage": usage,
                           "segments": [{"id": 0, "seek": 0, "start": 0.0, "end": seconds,
                                         "text": text, "tokens": [], "temperature": 0.0,
                                         "avg_logprob": -0.1, "compression_ratio": 1.0,
                                         "no_speech_prob": 0.0}]})
        return
    if fmt != "json":
        raise BadRequest(f"response_format {fmt!r} is not one of json, text, srt, vtt, "
                         "verbose_json")
    h._send_json(200, {"text": text, "usage": usage})


def speech(h, body: bytes, query: str) -> None:
    doc = json.loads(body or b"{}")
    text = doc.get("input")
    if not isinstance(text, str) or not text:
        raise BadRequest("input must be a non-empty string")
    speed = doc.get("speed") or 1.0
    if not isinstance(speed, (int, float)) or not 0.25 <= speed <= 4.0:
        raise BadRequest("speed must be within [0.25, 4]")
    audio = wav(len(text) * MS_PER_CHAR / 1000.0 / speed, f"{doc.get('voice')}|{text}")
    fmt = doc.get("response_format") or "wav"
    if fmt == "pcm":
        audio, ctype = audio[44:], "audio/pcm"
    else:
        ctype = "audio/wav"   # the demo makes WAV whatever was asked (no mp3 encoder)
    h.send_response(200)
    h.send_header("Content-Type", ctype)
    h.send_header("Transfer-Encoding", "chunked")
    h._demo_headers()
    h.end_headers()
    step = RATE * 2 * CHUNK_MS // 1000
    delay = h._header_number("X-Demo-Chunk-Delay-Ms", h.server.chunk_delay_ms) / 1000.0
    for at in range(0, len(audio), step):
        h._write_chunk(audio[at:at + step])
        if delay:
            time.sleep(delay)
    h._write_chunk(b"")


def generations(h, body: bytes, query: str) -> None:
    doc = json.loads(body or b"{}")
    prompt = doc.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise BadRequest("prompt must be a non-empty string")
    h._send_json(200, image_answer(prompt, b"", doc.get("n"), doc.get("size"),
                                   doc.get("response_format")))


def edits(h, body: bytes, query: str) -> None:
    fields = form(h.headers.get("Content-Type", ""), body)
    image = fields.get("image") or fields.get("image[]")
    if not image or not image[1].startswith(b"\x89PNG"):
        raise BadRequest("image must be a PNG file")
    mask = fields.get("mask")
    n = text_field(fields, "n")
    h._send_json(200, image_answer(text_field(fields, "prompt", ""),
                                   image[1] + (mask[1] if mask else b""),
                                   int(n) if n and n.isdigit() else 1, text_field(fields, "size"),
                                   text_field(fields, "response_format")))


def asr_json(h, body: bytes, query: str) -> None:
    doc = json.loads(body or b"{}")
    if doc.get("lang") != "zh":
        raise BadRequest('lang must be "zh"')
    try:
        audio = base64.b64decode(doc.get("audio") or "", validate=True)
    except ValueError:
        raise BadRequest("audio must be base64") from None
    text, seconds = transcript(audio)
    h._send_json(200, {"code": 0, "data": {"text": text, "duration": seconds}})


def asr_raw(h, body: bytes, query: str) -> None:
    if parse_qs(query).get("lang") != ["zh"]:
        raise BadRequest("the query needs lang=zh")
    if not h.headers.get("Content-Type", "").startswith("audio/"):
        raise BadRequest("the body must be audio/*")
    text, seconds = transcript(body)
    h._send_json(200, {"result": [{"transcript": text, "confidence": 0.93}],
                       "duration": seconds})


def tts_json(h, body: bytes, query: str) -> None:
    doc = json.loads(body or b"{}")
    text = doc.get("text")
    if not isinstance(text, str) or not text:
        raise BadRequest("text must be a non-empty string")
    audio = wav(len(text) * MS_PER_CHAR / 1000.0, f"{doc.get('speaker')}|{text}")
    h._send_json(200, {"status": "ok", "audio": base64.b64encode(audio).decode()})


def ocr_text(image: bytes) -> str:
    """What the demo OCR "reads" in a PNG: its size and checksum."""
    if image[:8] != b"\x89PNG\r\n\x1a\n":
        raise BadRequest("image must be a PNG")
    w, h = struct.unpack(">II", image[16:24])
    return f"{w}x{h} PNG, crc32 {zlib.crc32(image):08x}"


def ocr_json(h, body: bytes, query: str) -> None:
    doc = json.loads(body or b"{}")
    try:
        image = base64.b64decode(doc.get("image") or "", validate=True)
    except ValueError:
        raise BadRequest("image must be base64") from None
    h._send_json(200, {"text": ocr_text(image)})


def img_json(h, body: bytes, query: str) -> None:
    doc = json.loads(body or b"{}")
    prompt = doc.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise BadRequest("prompt must be a non-empty string")
    image = base64.b64decode(doc.get("image") or "")
    answer = image_answer(prompt, image, 1, None, "b64_json")
    h._send_json(200, {"images": [answer["data"][0]["b64_json"]]})


def send(h, status: int, content_type: str, body: bytes) -> None:
    h.send_response(status)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(body)))
    h._demo_headers()
    h.end_headers()
    h.wfile.write(body)


def error_body(protocol: str, status: int, message: str):
    """An error in an ASR vendor's own shape, or None for the others."""
    if protocol == "asr-json":
        return {"code": 2000 + status, "message": message}
    if protocol == "asr-raw":
        return {"error_code": status, "error_msg": message}
    if protocol == "tts-json":
        return {"status": "error", "reason": message}
    return None
