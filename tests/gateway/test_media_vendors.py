"""Brief 000's case (issue 25): one public ASR model, three vendors of three shapes
behind it (OpenAI multipart; JSON with base64 audio and {"lang": "zh"}; the raw WAV
with the language in the query), spread by weight with the breaker; the caller, on
the official `openai` client, sees one answer shape whichever vendor served it. And a
TTS vendor whose JSON answer carries base64 audio, which leaves as bytes."""
from __future__ import annotations

import base64
import collections

import openai
import pytest
import requests

from control_plane.demo import backends as demo
from control_plane.demo import media

WAV = media.wav(2.25, "vendors")
TEXT, SECONDS = media.transcript(WAV)
FAST_BREAKER = {"window_s": 30, "error_threshold": 0.3, "min_requests": 4, "cooldown_s": 30}

MAPPINGS = {
    "asr-json": {"path": "/asr/recognize", "upload": "json",
                 "request": {"audio": "{{file}}", "lang": "zh"},
                 "response": {"output": "/data/text", "duration": "/data/duration",
                              "error": "/message"}},
    "asr-raw": {"path": "/v1/recognize", "upload": "raw", "content_type": "audio/wav",
                "request": {}, "query": {"lang": "{{params.language}}"},
                "defaults": {"language": "zh"},
                "response": {"output": "/result/0/transcript", "error": "/error_msg"}},
    "img-gen": {"path": "/draw", "request": {"prompt": "{{input}}"},
                "response": {"output": "/images", "image": "/images"}},
    "img-edit": {"path": "/draw", "upload": "json",
                 "request": {"prompt": "{{params.prompt}}", "image": "{{file}}"},
                 "response": {"output": "/images", "image": "/images"}},
    "ocr-json": {"path": "/ocr", "request": {"image": "{{input}}"},
                 "response": {"output": "/text"}},
    "tts-json": {"path": "/tts", "request": {"text": "{{input}}", "speaker": "{{params.voice}}"},
                 "response": {"output": "/audio", "audio": "/audio", "audio_type": "audio/wav",
                              "error": "/reason"}},
}


@pytest.fixture(scope="module")
def vendors():
    started = {p: demo.serve(p, "127.0.0.1", 0, p) for p in ("asr-json", "asr-raw", "tts-json",
                                                                 "ocr-json", "img-json")}
    started["asr-json-slow"] = demo.serve("asr-json", "127.0.0.1", 0, "asr-json-slow",
                                          latency_ms=2000)
    yield started
    for s in started.values():
        s.shutdown()


def entry(id: int, server, mapping: str | None = None, weight: int = 100, port=None) -> dict:
    b = {"id": id, "name": server.name if server else f"dead-{id}", "scheme": "http",
         "host": "127.0.0.1", "port": port or server.port, "host_header": "localhost",
         "base_path": "", "weight": weight, "protocol": "vendor" if mapping else "openai"}
    if mapping:
        b["mapping"] = mapping
    return b


def snapshot(helpers, backends, vendors, version=1, asr=None, breaker=None) -> dict:
    a = backends["openai-a"]
    openai_b = {**a.entry(1)}
    asr = asr or [openai_b, entry(2, vendors["asr-json"], "asr-json"),
                  entry(3, vendors["asr-raw"], "asr-raw")]
    snap = helpers.make_snapshot(version, {
        "asr-demo": (5000, asr),
        "raw-only": (5000, [entry(4, vendors["asr-raw"], "asr-raw")]),
        "tts-vendor": (5000, [entry(5, vendors["tts-json"], "tts-json")]),
        "tts-openai": (5000, [{**a.entry(7)}]),
        "ocr-demo": (5000, [entry(8, vendors["ocr-json"], "ocr-json")]),
        "img-vendor": (5000, [entry(9, vendors["img-json"], "img-gen")]),
        "img-edit-vendor": (5000, [entry(10, vendors["img-json"], "img-edit")]),
    }, mappings=MAPPINGS)
    snap["model_types"] = {"asr/zh": "asr-demo", "tts/zh": "tts-vendor", "tts/en": "tts-openai",
                           "cv/ocr": "ocr-demo"}
    for m in ("asr-demo", "raw-only"):
        snap["models"][m]["media_tasks"] = ["transcription", "translation"]
    snap["models"]["tts-vendor"]["media_tasks"] = ["speech"]
    snap["models"]["tts-openai"]["media_tasks"] = ["speech"]
    for m in ("img-vendor", "img-edit-vendor"):
        snap["models"][m]["media_tasks"] = ["image"]
    if breaker:
        snap["breaker"] = breaker
    return snap


@pytest.fixture
def client(gateway, helpers, backends, vendors):
    r = gateway.push(snapshot(helpers, backends, vendors))
    assert r.status_code == 200, r.text
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=helpers.KEY, max_retries=0)


def transcribe(client, model="asr-demo", **kw):
    r = client.audio.transcriptions.with_raw_response.create(
        model=model, file=("call.wav", WAV, "audio/wav"), **kw)
    return r.headers.get("x-demo-backend"), r.parse()


def test_three_vendors_one_answer_shape(client):
    seen = collections.Counter()
    for _ in range(30):
        backend, t = transcribe(client, language="zh")
        assert t.text == TEXT
        seen[backend] += 1
    assert set(seen) == {"openai-a", "asr-json", "asr-raw"}, seen


def test_a_vendor_answer_in_every_response_format(client):
    _, t = transcribe(client, "raw-only")
    assert t.text == TEXT
    _, text = transcribe(client, "raw-only", response_format="text")
    assert text.strip() == TEXT
    _, srt = transcribe(client, "raw-only", response_format="srt")
    assert srt == media.subtitles(TEXT, SECONDS, vtt=False)
    _, vtt = transcribe(client, "raw-only", response_format="vtt")
    assert vtt == media.subtitles(TEXT, SECONDS, vtt=True)
    _, v = transcribe(client, "raw-only", response_format="verbose_json", language="zh")
    assert (v.text, v.duration, v.language) == (TEXT, SECONDS, "zh")
    assert v.segments[0].end == SECONDS
    t = client.audio.translations.create(model="raw-only", file=("c.wav", WAV, "audio/wav"))
    assert t.text == TEXT


def test_a_vendor_s_refusal_in_the_template(client):
    """asr-raw takes lang=zh only: the caller's language reaches its query string."""
    with pytest.raises(openai.BadRequestError) as exc:
        transcribe(client, "raw-only", language="en")
    assert "lang=zh" in exc.value.body["message"]


def test_a_dead_vendor_costs_the_caller_nothing(gateway, helpers, backends, vendors,
                                                 dead_port):
    """A vendor that cannot be reached: each request it failed is converted again, from
    the caller's upload, for another vendor; the breaker then moves its share."""
    asr = [entry(2, vendors["asr-json"], "asr-json"),
           entry(6, None, "asr-raw", port=dead_port)]
    r = gateway.push(snapshot(helpers, backends, vendors, asr=asr, breaker=FAST_BREAKER))
    assert r.status_code == 200, r.text
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=helpers.KEY, max_retries=0)
    for _ in range(30):
        backend, t = transcribe(client, language="zh")
        assert backend == "asr-json" and t.text == TEXT
    _, srt = transcribe(client, response_format="srt")
    assert srt == media.subtitles(TEXT, SECONDS, vtt=False)


def test_every_vendor_dead_is_one_502_in_the_template(gateway, helpers, backends, vendors,
                                                     dead_port):
    asr = [entry(2, None, "asr-json", port=dead_port), entry(3, None, "asr-raw", port=dead_port)]
    r = gateway.push(snapshot(helpers, backends, vendors, version=5, asr=asr))
    assert r.status_code == 200, r.text
    r = requests.post(gateway.url + "/v1/audio/transcriptions", timeout=10,
                      headers={"Authorization": f"Bearer {helpers.KEY}"},
                      data={"model": "asr-demo"}, files={"file": ("f.wav", WAV, "audio/wav")})
    helpers.assert_error(r, 502, "backend_error")
    assert "X-Sluice-Fallback" not in r.headers


@pytest.mark.parametrize("seconds", [2.25, 30.0])   # in nginx's memory; in its temp file
def test_every_transcription_answers_with_one_vendor_dead(gateway, helpers, backends, vendors,
                                                          dead_port, seconds):
    """Each vendor dead in turn behind asr-demo (the OpenAI one, proxied as it came;
    the JSON one; the raw one): every transcription answers, in the one shape."""
    audio = media.wav(seconds, "one-dead")
    text = media.transcript(audio)[0]
    live = {"openai-a": {**backends["openai-a"].entry(1)},
            "asr-json": entry(2, vendors["asr-json"], "asr-json"),
            "asr-raw": entry(3, vendors["asr-raw"], "asr-raw")}
    for version, dead in enumerate(live, start=10):
        asr = [{**b, "port": dead_port, "name": f"dead-{b['id']}"} if name == dead else b
               for name, b in live.items()]
        r = gateway.push(snapshot(helpers, backends, vendors, version=version, asr=asr))
        assert r.status_code == 200, r.text
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=helpers.KEY,
                               max_retries=0)
        seen = set()
        for _ in range(12):
            r = client.audio.transcriptions.with_raw_response.create(
                model="asr-demo", file=("call.wav", audio, "audio/wav"),
                response_format="verbose_json", language="zh")
            v = r.parse()
            assert (v.text, v.language) == (text, "zh"), dead
            seen.add(r.headers.get("x-demo-backend"))
        assert seen and dead not in seen, (dead, seen)


@pytest.mark.parametrize("seconds", [2.25, 30.0])
@pytest.mark.parametrize("fallback", ["raw-only", "asr-openai"])
def test_a_fallback_model_gets_the_upload_a_vendor_timed_out_on(gateway, helpers, backends,
                                                                 vendors, fallback, seconds):
    """A vendor (JSON with base64 audio) that times out: the fallback model gets the
    caller's upload as it came, converted for its own vendor or proxied unchanged."""
    snap = snapshot(helpers, backends, vendors, version=20)
    snap["models"]["slow-json"] = {
        "id": 30, "name": "slow-json", "timeout_ms": 300, "fallback_model": fallback,
        "media_tasks": ["transcription"],
        "backends": [entry(31, vendors["asr-json-slow"], "asr-json")]}
    snap["models"]["asr-openai"] = {
        "id": 32, "name": "asr-openai", "timeout_ms": 5000, "media_tasks": ["transcription"],
        "backends": [{**backends["openai-a"].entry(33)}]}
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    audio = media.wav(seconds, "slow-vendor")
    r = requests.post(gateway.url + "/v1/audio/transcriptions", timeout=10,
                      headers={"Authorization": f"Bearer {helpers.KEY}"},
                      data={"model": "slow-json", "response_format": "text"},
                      files={"file": ("f.wav", audio, "audio/wav")})
    assert r.status_code == 200, r.text
    assert r.headers["X-Sluice-Fallback"] == fallback
    assert r.headers["X-Demo-Backend"] == ("asr-raw" if fallback == "raw-only" else "openai-a")
    assert r.text.strip() == media.transcript(audio)[0]


def test_base64_audio_from_a_vendor_leaves_as_bytes(client):
    text = "a vendor speaks"
    with client.audio.speech.with_streaming_response.create(
            model="tts-vendor", voice="mei", input=text) as r:
        assert r.headers["content-type"] == "audio/wav"
        audio = r.read()
    assert audio == media.wav(len(text) * media.MS_PER_CHAR / 1000.0, f"mei|{text}")


def envelope(gw, helpers, model_type: str, data: str, **params):
    r = requests.post(gw.url + "/v1/predict", timeout=10,
                      headers={"Authorization": f"Bearer {helpers.KEY}"},
                      json={"api_version": "1.0", "model_type": model_type,
                            "request_id": "r-1", "params": {"input": data, **params}})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert (doc["model_type"], doc["request_id"]) == (model_type, "r-1")
    return r.headers.get("X-Demo-Backend"), doc


def test_brief_000_envelope_reaches_asr_tts_and_ocr(client, gateway, helpers):
    b64 = base64.b64encode(WAV).decode()
    seen = set()
    for _ in range(12):   # every vendor shape, one envelope
        backend, doc = envelope(gateway, helpers, "asr/zh", b64, language="zh")
        assert doc["outputs"] == [TEXT] and doc["usage"]["audio_seconds"] == SECONDS
        seen.add(backend)
    assert len(seen) >= 2, seen
    text = "ni hao"
    for model_type, voice, seed in (("tts/zh", "mei", "mei|ni hao"),
                                    ("tts/en", "alloy", "alloy|ni hao")):
        _, doc = envelope(gateway, helpers, model_type, text, voice=voice)
        assert base64.b64decode(doc["outputs"][0]) == media.wav(
            len(text) * media.MS_PER_CHAR / 1000.0, seed), model_type
    image = media.png(12, 7, b"scan")
    _, doc = envelope(gateway, helpers, "cv/ocr", base64.b64encode(image).decode())
    assert doc["outputs"] == [media.ocr_text(image)]


def test_images_from_a_vendor(client):
    """A vendor's base64 images in OpenAI's answer: generated from a prompt, and edited
    from an uploaded image (base64 inside the vendor's JSON)."""
    g = client.images.generate(model="img-vendor", prompt="a junk", response_format="b64_json")
    assert base64.b64decode(g.data[0].b64_json) == media.png(64, 64, b"a junk\x00")
    image = media.png(8, 8, b"photo")
    e = client.images.edit(model="img-edit-vendor", image=("p.png", image, "image/png"),
                           prompt="add a sail")
    assert base64.b64decode(e.data[0].b64_json) == media.png(64, 64, image + b"add a sail\x00")


def test_a_large_upload_through_each_vendor_shape(client):
    """2.6 MB: past the upload location's buffer and past the 1 MiB body limit of the
    internal location that fetches a converted answer."""
    big = media.wav(80.0, "large")
    for model, shape in (("raw-only", "asr-raw"), ("asr-demo", None)):
        seen = set()
        for _ in range(8 if shape is None else 1):
            r = client.audio.transcriptions.with_raw_response.create(
                model=model, file=("big.wav", big, "audio/wav"))
            assert r.parse().text == media.transcript(big)[0]
            seen.add(r.headers.get("x-demo-backend"))
        assert shape is None or seen == {shape}
