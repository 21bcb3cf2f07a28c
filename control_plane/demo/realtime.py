"""A demo realtime backend: OpenAI's Realtime API over a real WebSocket, no model.

``python -m control_plane.demo.realtime --port P`` serves ``GET /v1/realtime?model=…``
(a WebSocket; any other path answers 404) and ``GET /health``. It speaks the events a
voice agent sends and expects:

- on connect: ``session.created``; ``session.update`` -> ``session.updated``
- ``input_audio_buffer.append`` (base64 audio) collects audio;
  ``input_audio_buffer.commit`` -> ``input_audio_buffer.committed`` and the user item,
  whose transcript is derived from the audio (its length and CRC-32), deterministic;
  ``input_audio_buffer.clear`` -> ``input_audio_buffer.cleared``
- ``conversation.item.create`` (input text) -> ``conversation.item.created``
- ``response.create`` -> ``response.created``, the answer as
  ``response.output_text.delta`` events (output modality text) or as
  ``response.output_audio.delta`` (base64 PCM16 silence, 24 kHz, 10 ms per word) with
  ``response.output_audio_transcript.delta`` (audio, the default), then
  ``response.done`` with ``usage`` (input tokens: the words heard or read, plus one
  per 100 bytes of audio; output tokens: the answer's words)
- ``demo.close`` (not OpenAI's; for tests): the backend closes the session with the
  event's ``code`` and ``reason``; ``demo.large`` (also for tests): an event of that
  type padded to about ``bytes`` bytes; ``session.update`` with
  ``demo_fragment_bytes`` N: each ``response.done`` from then on is sent as a
  fragmented message of N-byte frames
- anything else: an ``error`` event (the session stays open, as OpenAI's does)

The session object also shows ``demo_offered_protocols``: the subprotocols the caller
offered (the tests check that a gateway passed no key on).

The answer is ``echo: <what it heard>``. ``--latency-ms`` waits before each response.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import itertools
import json
import signal
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

SAMPLE_RATE = 24_000
SILENCE_PER_WORD = b"\x00\x00" * (SAMPLE_RATE // 100)   # 10 ms of PCM16 mono


class Session:
    """One caller's conversation: its settings, the audio not yet committed, and what
    it last said (the next response echoes it)."""

    def __init__(self, model: str, name: str, latency_ms: float, offered: list[str]):
        self.ids = itertools.count(1)
        self.offered = offered   # the subprotocols the caller offered (shown to tests)
        self.model = model
        self.name = name
        self.latency_ms = latency_ms
        self.modalities = ["audio"]
        self.audio = bytearray()
        self.heard = ""
        self.heard_audio = 0      # bytes of audio behind `heard`
        self.fragment = 0         # response.done in frames of this many bytes (0: one)
        self.id = f"sess_{name}_{next(self.ids)}"

    def event(self, type_: str, **fields: Any) -> str:
        return json.dumps({"type": type_, "event_id": f"event_{next(self.ids)}", **fields})

    def session_doc(self) -> dict:
        return {"id": self.id, "object": "realtime.session", "type": "realtime",
                "model": self.model, "output_modalities": self.modalities,
                "demo_offered_protocols": self.offered}

    def item(self, text: str, role: str = "user") -> dict:
        kind = "input_text" if role == "user" else "output_text"
        return {"id": f"item_{next(self.ids)}", "object": "realtime.item", "type": "message",
                "status": "completed", "role": role,
                "content": [{"type": kind, "text": text}]}


def transcript_of(audio: bytes) -> str:
    """What the demo 'hears' in `audio`: its length and checksum, in words."""
    return f"audio of {len(audio)} bytes crc {binascii.crc32(audio):08x}"


async def answer(ws: ServerConnection, s: Session, event: dict) -> None:
    """React to one client event."""
    kind = event.get("type")
    if kind == "session.update":
        mods = (event.get("session") or {}).get("output_modalities")
        if isinstance(mods, list) and mods:
            s.modalities = [str(m) for m in mods]
        s.fragment = int((event.get("session") or {}).get("demo_fragment_bytes") or 0)
        await ws.send(s.event("session.updated", session=s.session_doc()))
    elif kind == "input_audio_buffer.append":
        try:
            s.audio += base64.b64decode(event.get("audio") or "", validate=True)
        except binascii.Error:
            await ws.send(s.event("error", error={"type": "invalid_request_error",
                                                  "message": "audio is not base64"}))
    elif kind == "input_audio_buffer.commit":
        item = s.item(transcript_of(bytes(s.audio)))
        s.heard, s.heard_audio = item["content"][0]["text"], len(s.audio)
        s.audio.clear()
        await ws.send(s.event("input_audio_buffer.committed", item_id=item["id"]))
        await ws.send(s.event("conversation.item.created", item=item))
    elif kind == "input_audio_buffer.clear":
        s.audio.clear()
        await ws.send(s.event("input_audio_buffer.cleared"))
    elif kind == "conversation.item.create":
        item = event.get("item") or {}
        texts = [c.get("text", "") for c in item.get("content") or []
                 if isinstance(c, dict)]
        s.heard, s.heard_audio = " ".join(t for t in texts if t), 0
        await ws.send(s.event("conversation.item.created", item=s.item(s.heard)))
    elif kind == "response.create":
        await respond(ws, s)
    elif kind == "demo.large":   # not OpenAI's: one large event (tests)
        await ws.send(s.event("demo.large", pad="x" * int(event.get("bytes") or 0)))
    elif kind == "demo.close":   # not OpenAI's: the backend ends the session (tests)
        await ws.close(int(event.get("code") or 1000), str(event.get("reason") or ""))
    else:
        await ws.send(s.event("error", error={"type": "invalid_request_error",
                                              "message": f"unknown event type {kind!r}"}))


async def respond(ws: ServerConnection, s: Session) -> None:
    """response.created, the answer's deltas word by word, response.done with usage."""
    if s.latency_ms:
        await asyncio.sleep(s.latency_ms / 1000)
    rid = f"resp_{next(s.ids)}"
    item = s.item("", role="assistant")
    await ws.send(s.event("response.created", response={
        "id": rid, "object": "realtime.response", "status": "in_progress", "output": []}))
    words = ("echo: " + s.heard).split()
    audio = "audio" in s.modalities
    for i, word in enumerate(words):
        piece = word if i == 0 else " " + word
        common = {"response_id": rid, "item_id": item["id"], "output_index": 0,
                  "content_index": 0}
        if audio:
            await ws.send(s.event("response.output_audio.delta", **common,
                                  delta=base64.b64encode(SILENCE_PER_WORD).decode()))
            await ws.send(s.event("response.output_audio_transcript.delta", **common,
                                  delta=piece))
        else:
            await ws.send(s.event("response.output_text.delta", **common, delta=piece))
    heard_words = len(s.heard.split())
    usage = {"input_tokens": heard_words + s.heard_audio // 100,
             "output_tokens": len(words)}
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    item["content"] = [{"type": "output_audio" if audio else "output_text",
                        "transcript" if audio else "text": " ".join(words)}]
    done = s.event("response.done", response={
        "id": rid, "object": "realtime.response", "status": "completed",
        "output": [item], "usage": usage})
    n = s.fragment
    await ws.send([done[i:i + n] for i in range(0, len(done), n)] if n else done)


def handler(name: str, latency_ms: float):
    async def session(ws: ServerConnection) -> None:
        path = ws.request.path if ws.request else ""
        model = ""
        if "?" in path:
            model = (parse_qs(urlsplit(path).query).get("model") or [""])[0]
        offered = [p.strip() for h in ws.request.headers.get_all("Sec-WebSocket-Protocol")
                   for p in h.split(",")] if ws.request else []
        s = Session(model, name, latency_ms, offered)
        await ws.send(s.event("session.created", session=s.session_doc()))
        try:
            async for message in ws:
                try:
                    event = json.loads(message)
                except (TypeError, ValueError):
                    await ws.send(s.event("error", error={
                        "type": "invalid_request_error", "message": "not JSON"}))
                    continue
                if isinstance(event, dict):
                    await answer(ws, s, event)
        except ConnectionClosed:
            pass
    return session


def check_request(connection: ServerConnection, request: Request) -> Response | None:
    """Plain HTTP: /health answers; a WebSocket goes on only to /v1/realtime."""
    path = request.path.split("?", 1)[0]
    if path == "/health":
        return connection.respond(HTTPStatus.OK, "ok\n")
    if not path.endswith("/v1/realtime"):
        return connection.respond(HTTPStatus.NOT_FOUND, "no such endpoint\n")
    return None


def select_subprotocol(connection: ServerConnection, offered: list[str]) -> str | None:
    return "realtime" if "realtime" in offered else None


async def run(host: str, port: int, name: str, latency_ms: float) -> None:
    async with serve(handler(name, latency_ms), host, port, process_request=check_request,
                     select_subprotocol=select_subprotocol,
                     max_size=16 * 1024 * 1024) as server:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, server.close)
        print(f"demo realtime backend {name} on ws://{host}:{port}/v1/realtime", flush=True)
        await server.wait_closed()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m control_plane.demo.realtime",
                                     description="Run a demo OpenAI Realtime backend.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--name", default="realtime")
    parser.add_argument("--latency-ms", type=float, default=0,
                        help="wait before each response")
    args = parser.parse_args(argv)
    asyncio.run(run(args.host, args.port, args.name, args.latency_ms))


if __name__ == "__main__":
    main()
