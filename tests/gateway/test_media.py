"""Audio and images through the gateway (issue 25): the official `openai` client
unchanged against real demo backends (control_plane/demo/media.py), and bad uploads
refused in the error template before anything reaches a backend."""
from __future__ import annotations

import base64
import io
import json
import socket
import time

import openai
import pytest
import requests
from waiting import eventually

from control_plane.demo import media

WAV = media.wav(1.5, "test")           # a real 1.5 s WAV
TEXT, SECONDS = media.transcript(WAV)  # what the demo backend hears in it
PNG = media.png(8, 8, b"edit me")


def media_snapshot(helpers, backends, dead_port, **over) -> dict:
    """whisper-demo, tts-demo and image-demo on openai-a; chat-demo does none of it;
    lost-asr's backend is a port where nothing listens (a refusal there proves nothing
    was sent)."""
    a = backends["openai-a"]
    dead = {"id": 9, "name": "dead", "protocol": "openai", "scheme": "http",
            "host": "127.0.0.1", "port": dead_port, "host_header": "x", "base_path": "",
            "weight": 100}
    snap = helpers.make_snapshot(1, {
        "chat-demo": (5000, [a.entry(1)]),
        "whisper-demo": (5000, [a.entry(2)]),
        "tts-demo": (5000, [a.entry(3)]),
        "image-demo": (5000, [a.entry(4)]),
        "lost-asr": (5000, [dead]),
    })
    m = snap["models"]
    m["whisper-demo"]["media_tasks"] = ["transcription", "translation"]
    m["tts-demo"]["media_tasks"] = ["speech"]
    m["image-demo"]["media_tasks"] = ["image"]
    m["lost-asr"]["media_tasks"] = ["transcription"]
    m["lost-asr"]["max_request_bytes"] = 1024 * 1024
    for name, fields in over.items():
        m[name].update(fields)
    return snap


@pytest.fixture
def media_gw(gateway, helpers, backends, dead_port):
    r = gateway.push(media_snapshot(helpers, backends, dead_port))
    assert r.status_code == 200, r.text
    return gateway


@pytest.fixture
def client(media_gw, helpers):
    return openai.OpenAI(base_url=media_gw.url + "/v1", api_key=helpers.KEY, max_retries=0)


def test_transcription_in_every_response_format(client):
    f = ("hello.wav", WAV, "audio/wav")
    t = client.audio.transcriptions.create(model="whisper-demo", file=f)
    assert t.text == TEXT
    assert client.audio.transcriptions.create(model="whisper-demo", file=f,
                                              response_format="text").strip() == TEXT
    srt = client.audio.transcriptions.create(model="whisper-demo", file=f, response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:01,500\n") and TEXT in srt
    vtt = client.audio.transcriptions.create(model="whisper-demo", file=f, response_format="vtt")
    assert vtt.startswith("WEBVTT") and "00:00:01.500" in vtt and TEXT in vtt
    v = client.audio.transcriptions.create(model="whisper-demo", file=f, language="zh",
                                           prompt="p", temperature=0.2,
                                           response_format="verbose_json")
    assert v.text == TEXT and v.duration == SECONDS and v.language == "zh"
    assert v.segments[0].end == SECONDS


def test_transcription_streams_deltas(client):
    stream = client.audio.transcriptions.create(model="whisper-demo", stream=True,
                                                file=("a.wav", WAV, "audio/wav"))
    events = list(stream)
    deltas = "".join(e.delta for e in events if e.type == "transcript.text.delta")
    assert deltas.strip() == TEXT
    assert events[-1].type == "transcript.text.done" and events[-1].text == TEXT


def test_translation(client):
    t = client.audio.translations.create(model="whisper-demo",
                                         file=("a.wav", WAV, "audio/wav"))
    assert t.text == TEXT


def test_a_large_upload_streams_from_nginx_s_file(client):
    """4 MiB: past the upload location's memory buffer, so nginx proxies it from its
    temporary file; the model is read from the form's head only."""
    big = media.wav(130.0, "big")
    t = client.audio.transcriptions.create(model="whisper-demo", file=("b.wav", big,
                                                                      "audio/wav"))
    assert t.text == media.transcript(big)[0]


def test_fields_after_the_file_and_model_in_the_query(media_gw, helpers):
    big = media.wav(20.0, "late")
    files = [("file", ("late.wav", big, "audio/wav")), ("model", (None, "whisper-demo")),
             ("response_format", (None, "text"))]
    h = {"Authorization": f"Bearer {helpers.KEY}"}
    r = requests.post(media_gw.url + "/v1/audio/transcriptions", files=files, headers=h,
                      timeout=10)
    assert r.status_code == 200, r.text
    assert r.text.strip() == media.transcript(big)[0]
    r = requests.post(media_gw.url + "/v1/audio/transcriptions?model=whisper-demo",
                      files={"file": ("a.wav", WAV, "audio/wav")}, headers=h, timeout=10)
    assert r.status_code == 200 and r.json()["text"] == TEXT


def test_speech_streams_a_real_wav(client):
    text = "Sluice speaks in a steady voice."
    with client.audio.speech.with_streaming_response.create(
            model="tts-demo", voice="alloy", input=text, response_format="wav") as r:
        assert r.headers["content-type"] == "audio/wav"
        assert r.headers.get("transfer-encoding") == "chunked"
        audio = b"".join(r.iter_bytes())
    assert audio[:4] == b"RIFF" and audio[8:12] == b"WAVE"
    assert media.duration(audio) == pytest.approx(len(text) * media.MS_PER_CHAR / 1000, 0.01)


def test_speech_reaches_the_caller_before_the_backend_ends(media_gw, helpers):
    """The first chunk arrives while the backend still sends (200 ms between chunks)."""
    h = {"Authorization": f"Bearer {helpers.KEY}", "X-Demo-Chunk-Delay-Ms": "200"}
    started = time.monotonic()
    with requests.post(media_gw.url + "/v1/audio/speech", headers=h, stream=True, timeout=10,
                       json={"model": "tts-demo", "input": "x" * 20, "voice": "a"}) as r:
        assert r.status_code == 200
        pieces = r.iter_content(chunk_size=None)
        first = next(pieces)
        first_at = time.monotonic() - started
        rest = b"".join(pieces)
        total = time.monotonic() - started
    assert first[:4] == b"RIFF" and rest
    assert first_at < total - 0.5, (first_at, total)


def test_images_generate_and_edit(client):
    g = client.images.generate(model="image-demo", prompt="a lighthouse", size="32x16",
                               n=2, response_format="b64_json")
    assert len(g.data) == 2
    raw = base64.b64decode(g.data[0].b64_json)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[16:24] == (32).to_bytes(4, "big") \
        + (16).to_bytes(4, "big")
    e = client.images.edit(model="image-demo", image=("in.png", PNG, "image/png"),
                           mask=("mask.png", PNG, "image/png"), prompt="add a boat")
    assert base64.b64decode(e.data[0].b64_json)[:4] == b"\x89PNG"


def test_a_chat_model_asked_for_speech_names_model(client, helpers):
    with pytest.raises(openai.BadRequestError) as exc:
        client.audio.speech.create(model="chat-demo", voice="alloy", input="hi")
    err = exc.value.body
    assert err["param"] == "model" and "chat-demo" in err["message"]
    with pytest.raises(openai.BadRequestError) as exc:
        client.images.generate(model="tts-demo", prompt="x")
    assert exc.value.body["param"] == "model"


def refusal(gw, helpers, status, err_type, param=None, **kw):
    kw.setdefault("headers", {})["Authorization"] = f"Bearer {helpers.KEY}"
    r = requests.post(gw.url + "/v1/audio/transcriptions", timeout=10, **kw)
    err = helpers.assert_error(r, status, err_type)
    if param:
        assert err["param"] == param, err
    return err


def test_bad_uploads_are_refused_before_a_backend(media_gw, helpers):
    """lost-asr's backend does not listen: a 400 (not a 502) shows nothing was sent."""
    err = refusal(media_gw, helpers, 400, "invalid_request_error", "file",
                  json={"model": "lost-asr"})
    assert "multipart/form-data" in err["message"]
    err = refusal(media_gw, helpers, 400, "invalid_request_error", "file",
                  data={"model": "lost-asr"}, files={"other": ("x.wav", WAV, "audio/wav")})
    assert "file" in err["message"]
    err = refusal(media_gw, helpers, 400, "invalid_request_error", "file",
                  data={"model": "lost-asr"}, files={"file": ("x.txt", b"hi", "text/plain")})
    assert "text/plain" in err["message"]
    refusal(media_gw, helpers, 400, "invalid_request_error", "model",
            files={"file": ("x.wav", WAV, "audio/wav")})
    refusal(media_gw, helpers, 404, "not_found",
            data={"model": "nope"}, files={"file": ("x.wav", WAV, "audio/wav")})
    refusal(media_gw, helpers, 400, "invalid_request_error", "model",
            data={"model": "chat-demo"}, files={"file": ("x.wav", WAV, "audio/wav")})


def test_over_the_model_s_limit_is_413(media_gw, helpers):
    big = media.wav(40.0, "big")   # 1.28 MB, lost-asr takes 1 MiB
    refusal(media_gw, helpers, 413, "payload_too_large",
            data={"model": "lost-asr"}, files={"file": ("x.wav", big, "audio/wav")})


def raw_head(gw, path: str, length: int, helpers, form: bytes = b"--b\r\n"
             ) -> tuple[bytes, float]:
    """Send only the headers of a `length`-byte upload and the start of its `form`; the
    answer and how soon it came."""
    host, port = gw.url.split("//")[1].split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {helpers.KEY}\r\n"
                   "Content-Type: multipart/form-data; boundary=b\r\n"
                   f"Content-Length: {length}\r\n\r\n").encode() + form)
        answer = s.recv(65536)
    return answer, time.monotonic() - started


def test_413_before_the_upload_is_read(media_gw, helpers):
    """30 MiB announced, none of it sent: past every model's limit (25 MiB), and past
    the limit of the model the query names, the answer comes at once."""
    answer, took = raw_head(media_gw, "/v1/audio/transcriptions", 30 * 1024 * 1024, helpers)
    assert answer.startswith(b"HTTP/1.1 413") and b'"payload_too_large"' in answer
    assert took < 2
    answer, took = raw_head(media_gw, "/v1/audio/transcriptions?model=lost-asr",
                            2 * 1024 * 1024, helpers)
    assert answer.startswith(b"HTTP/1.1 413") and b"lost-asr" in answer
    assert took < 2
    # the model named in the form only: its head is read, not the rest
    form = (b"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nlost-asr\r\n"
            b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            b"Content-Type: audio/wav\r\n\r\n" + media.wav(3.0, "head")[:70_000])
    answer, took = raw_head(media_gw, "/v1/audio/transcriptions", 2 * 1024 * 1024, helpers,
                            form)
    assert answer.startswith(b"HTTP/1.1 413") and b"lost-asr" in answer, answer[:300]
    assert took < 2


def test_the_log_line_and_retry_from_nginx_s_copy(media_gw, helpers, backends, dead_port):
    """A dead backend first, a live one second: the upload is re-sent from nginx's copy."""
    a = backends["openai-a"]
    dead = {"id": 9, "name": "dead", "protocol": "openai", "scheme": "http",
            "host": "127.0.0.1", "port": dead_port, "host_header": "x", "base_path": "",
            "weight": 1000}
    snap = media_snapshot(helpers, backends, dead_port)
    snap["version"] = 2
    snap["models"]["whisper-demo"]["backends"] = [dead, a.entry(2, weight=1)]
    assert media_gw.push(snap).status_code == 200
    big = media.wav(20.0, "retry")
    h = {"Authorization": f"Bearer {helpers.KEY}"}
    for _ in range(3):
        r = requests.post(media_gw.url + "/v1/audio/transcriptions", headers=h, timeout=10,
                          data={"model": "whisper-demo"},
                          files={"file": ("r.wav", io.BytesIO(big), "audio/wav")})
        assert r.status_code == 200, r.text
        assert r.json()["text"] == media.transcript(big)[0]


def test_usage_counts_audio_seconds_characters_and_images(media_gw, helpers, client):
    """usage_daily's counters (GET /internal/usage) and the log line: 1.5 s of audio a
    transcription (the WAV's header), characters spoken, images made."""
    def row(model):
        day = time.strftime("%Y%m%d", time.gmtime())
        return media_gw.usage()["counters"].get(f"{day}|1|{model}", [0] * 8)

    before = {m: row(m) for m in ("whisper-demo", "tts-demo", "image-demo")}
    for _ in range(2):
        client.audio.transcriptions.create(model="whisper-demo", file=("a.wav", WAV, "audio/wav"))
    client.audio.speech.create(model="tts-demo", voice="a", input="héllo", response_format="wav")
    client.images.generate(model="image-demo", prompt="p", n=3)
    with pytest.raises(openai.BadRequestError):   # refused: bills nothing
        client.images.generate(model="chat-demo", prompt="p", n=3)
    grown = {m: [a - b for a, b in zip(row(m), before[m])] for m in before}
    assert grown["whisper-demo"] == [2, 0, 0, 0, 3000, 0, 0, 0]
    assert grown["tts-demo"] == [1, 0, 0, 0, 0, 5, 0, 0]
    assert grown["image-demo"] == [1, 0, 0, 0, 0, 0, 3, 0]
    def logged():   # the access log is flushed every second
        lines = [json.loads(line) for line in (media_gw.prefix / "logs" / "access.log")
                 .read_text().splitlines()[-5:]]
        by = {line["model"]: line for line in lines if line["status"] == "200"}
        return by if len(by) == 3 else None

    by_model = eventually(logged)
    assert by_model["whisper-demo"]["audio_seconds"] == "1.5"
    assert by_model["tts-demo"]["input_chars"] == "5"
    assert by_model["image-demo"]["images"] == "3"


CAPPED_KEY = "sk-test-capped-0123456789abcdef"


def test_plan_caps_per_day(media_gw, helpers, backends, dead_port):
    """A plan's daily caps: reserved up front, a failed answer gives its share back,
    past the cap 429 with retry_after (the seconds to the next UTC day)."""
    snap = media_snapshot(helpers, backends, dead_port)
    snap["version"] = 2
    helpers.add_planned(snap, CAPPED_KEY, {"max_audio_seconds_per_day": 2,
                                           "max_speech_chars_per_day": 10,
                                           "max_images_per_day": 4}, name="capped")
    assert media_gw.push(snap).status_code == 200
    capped = openai.OpenAI(base_url=media_gw.url + "/v1", api_key=CAPPED_KEY, max_retries=0)

    def refused(call):
        with pytest.raises(openai.RateLimitError) as exc:
            call()
        err = exc.value.body
        assert 0 < err["retry_after"] <= 86400 and "per_day" in err["message"], err
        return err

    with pytest.raises(openai.InternalServerError):   # the backend fails: nothing billed
        capped.images.generate(model="image-demo", prompt="p", n=3,
                               extra_headers={"X-Demo-Status": "500"})
    assert len(capped.images.generate(model="image-demo", prompt="p", n=3).data) == 3
    assert "max_images_per_day" in refused(
        lambda: capped.images.generate(model="image-demo", prompt="p", n=2))["message"]
    assert len(capped.images.generate(model="image-demo", prompt="p", n=1).data) == 1

    capped.audio.speech.create(model="tts-demo", voice="a", input="six ch")
    refused(lambda: capped.audio.speech.create(model="tts-demo", voice="a", input="six ch"))

    f = ("a.wav", WAV, "audio/wav")   # 1.5 s: one fits in 2 s, two do not
    assert capped.audio.transcriptions.create(model="whisper-demo", file=f).text == TEXT
    refused(lambda: capped.audio.transcriptions.create(model="whisper-demo", file=f))


@pytest.mark.parametrize("seconds", [2.0, 30.0])   # in nginx's memory; in its temp file
def test_an_upload_falls_back_on_timeout(media_gw, helpers, backends, dead_port, seconds):
    snap = media_snapshot(helpers, backends, dead_port)
    snap["version"] = 3
    snap["models"]["slow-asr"] = {"id": 20, "name": "slow-asr", "timeout_ms": 300,
                                  "fallback_model": "whisper-demo",
                                  "media_tasks": ["transcription"],
                                  "backends": [backends["openai-b"].entry(21)]}
    assert media_gw.push(snap).status_code == 200
    audio = media.wav(seconds, "fallback")
    r = requests.post(media_gw.url + "/v1/audio/transcriptions", timeout=10,
                      headers={"Authorization": f"Bearer {helpers.KEY}",
                               "X-Demo-Latency-Ms": "800"},
                      data={"model": "slow-asr"}, files={"file": ("f.wav", audio, "audio/wav")})
    assert r.status_code == 200, r.text
    assert r.headers["X-Sluice-Fallback"] == "whisper-demo"
    assert r.json()["text"] == media.transcript(audio)[0]


SLOT_KEY = "sk-test-oneslot-0123456789abcdef"


def test_a_caller_gone_mid_upload_frees_its_slot(media_gw, helpers, backends, dead_port):
    """A plan of one request at a time: callers that send half an upload and hang up
    leave the slot free for the next."""
    snap = media_snapshot(helpers, backends, dead_port)
    snap["version"] = 4
    helpers.add_planned(snap, SLOT_KEY, {"max_concurrent": 1}, name="one-slot")
    assert media_gw.push(snap).status_code == 200
    host, port = media_gw.url.split("//")[1].split(":")
    head = (b"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-demo\r\n"
            b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            b"Content-Type: audio/wav\r\n\r\n")
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall((f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\n"
                       f"Authorization: Bearer {SLOT_KEY}\r\n"
                       "Content-Type: multipart/form-data; boundary=b\r\n"
                       f"Content-Length: {4 * 1024 * 1024}\r\n\r\n").encode()
                      + head + WAV[:100_000])
    capped = openai.OpenAI(base_url=media_gw.url + "/v1", api_key=SLOT_KEY, max_retries=0)
    t = eventually(lambda: capped.audio.transcriptions.create(
        model="whisper-demo", file=("a.wav", WAV, "audio/wav")))
    assert t.text == TEXT


@pytest.mark.parametrize("path", ["/v1/audio/transcriptions",          # read: the head
                                  "/v1/audio/transcriptions?model=lost-asr"])   # none
def test_keepalive_after_an_early_413(media_gw, helpers, path):
    """A caller that sends its whole body anyway and reuses the connection: the rest
    of the refused body is never taken for a next request (the gateway closes it)."""
    host, port = media_gw.url.split("//")[1].split(":")
    body = (b"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nlost-asr\r\n"
            b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            b"Content-Type: audio/wav\r\n\r\n" + media.wav(40.0, "keep") + b"\r\n--b--\r\n")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\n"
                   f"Authorization: Bearer {helpers.KEY}\r\n"
                   "Content-Type: multipart/form-data; boundary=b\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode())
        try:
            s.sendall(body + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        except OSError:
            pass   # the gateway closed the connection: fine
        got = b""
        try:
            while True:
                piece = s.recv(65536)
                if not piece:
                    break
                got += piece
        except OSError:
            pass
    assert got.startswith(b"HTTP/1.1 413") and b"Connection: close" in got, got[:600]
    assert b"lost-asr" in got and b"payload_too_large" in got
    assert got.count(b"HTTP/1.1 ") == 1, got[:2000]   # nothing answered the rest
