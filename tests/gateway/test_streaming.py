"""Streams through the gateway (SSE passthrough and frame-by-frame conversion) and
the official `openai` client against the gateway."""
from __future__ import annotations

import json
import time

import openai
import pytest
import requests

MAPPINGS = {
    "vendor-a": {"path": "/generate", "request": {"text": "{{input}}"},
                 "response": {"output": "/result/text", "error": "/err/msg"}},
}
TEXT = "流式 stream 🚀 one two"


@pytest.fixture
def streaming_gw(gateway, helpers, protocol_backends):
    b = protocol_backends
    models = {
        "llm": (5000, [b["openai"].entry(1)]),
        "v2": (5000, [b["kserve_v2"].entry(2)]),
        "va": (5000, [b["vendor-a"].entry(3, protocol="vendor", mapping="vendor-a")]),
        "kv1": (5000, [b["predict"].entry(4)]),
    }
    r = gateway.push(helpers.make_snapshot(1, models, mappings=MAPPINGS))
    assert r.status_code == 200, r.text
    return gateway


def stream(gw, key, model, text=TEXT, path="/v1/chat/completions", headers=None, **extra):
    body = {"model": model, "stream": True, **extra}
    if path == "/v1/chat/completions":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return requests.post(gw.url + path, json=body, stream=True, timeout=10,
                         headers={"Authorization": f"Bearer {key}", **(headers or {})})


def events(r):
    out = []
    for line in r.iter_lines():
        if line.startswith(b"data: "):
            data = line[len(b"data: "):]
            out.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return out


def deltas(evs):
    text = ""
    for e in evs:
        for c in e["choices"]:
            text += c.get("delta", {}).get("content") or c.get("text") or ""
    return text


@pytest.mark.parametrize("model, answer", [("llm", "echo: "), ("v2", "v2: "), ("va", "A: ")])
def test_chat_stream_from_every_kind_of_backend(streaming_gw, helpers, model, answer):
    r = stream(streaming_gw, helpers.KEY, model, stream_options={"include_usage": True})
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    evs = events(r)
    assert evs[-1] == "[DONE]"
    body = evs[:-1]
    assert all(e["object"] == "chat.completion.chunk" for e in body)
    assert body[0]["choices"][0]["delta"]["role"] == "assistant"
    assert deltas(body) == answer + TEXT                   # byte-exact after decoding
    finishes = [c["finish_reason"] for e in body for c in e["choices"] if c["finish_reason"]]
    assert finishes == ["stop"]
    # usage in the final chunk, with an empty choices list (OpenAI's shape)
    assert body[-1]["choices"] == [] and body[-1]["usage"]["completion_tokens"] > 0


def test_v2_stream_is_converted_frame_by_frame(streaming_gw, helpers):
    r = stream(streaming_gw, helpers.KEY, "v2")
    evs = events(r)[:-1]
    # role chunk + one chunk per backend frame (5 words of "v2: " + TEXT) + finish
    assert len(evs) == 1 + len(("v2: " + TEXT).split()) + 1
    assert "usage" not in evs[-1]                          # not asked for


def test_completions_stream_converted(streaming_gw, helpers):
    r = stream(streaming_gw, helpers.KEY, "v2", path="/v1/completions")
    evs = events(r)
    assert evs[-1] == "[DONE]"
    assert all(e["object"] == "text_completion" for e in evs[:-1])
    assert deltas(evs[:-1]) == "v2: " + TEXT


@pytest.mark.parametrize("model", ["llm", "v2"])
def test_first_chunk_arrives_before_the_backend_finishes(streaming_gw, helpers, model):
    # 8 words, 250 ms between backend frames: the backend needs >= 1.75 s in all. The
    # first converted chunk must reach us while it is still writing: we ask for at
    # least 1 s between our first chunk and the end (generous for a loaded machine;
    # a buffering gateway would give ~0 s).
    text = "a b c d e f g h"
    r = stream(streaming_gw, helpers.KEY, model, text=text,
               headers={"X-Demo-Chunk-Delay-Ms": "250"})
    lines = r.iter_lines()
    first = next(line for line in lines if line.startswith(b"data: "))
    t_first = time.monotonic()
    assert json.loads(first[6:])["object"] == "chat.completion.chunk"
    rest = [line for line in lines if line.startswith(b"data: ")]
    t_end = time.monotonic()
    assert rest[-1] == b"data: [DONE]"
    assert t_end - t_first >= 1.0, f"first chunk only {t_end - t_first:.2f}s before the end"


def test_client_disconnect_mid_stream_closes_the_backend_request(streaming_gw, helpers,
                                                                 protocol_backends):
    # 40 words, 100 ms apart: the backend would write for ~4 s. We read one chunk
    # and hang up; the gateway must drop its upstream request too, which the backend
    # sees as a broken pipe on its next write.
    health = f"http://127.0.0.1:{protocol_backends['openai'].port}/health"
    before = requests.get(health, timeout=5).json()["streams"]
    r = stream(streaming_gw, helpers.KEY, "llm", text=" ".join(["word"] * 40),
               headers={"X-Demo-Chunk-Delay-Ms": "100"})
    first = next(line for line in r.iter_lines() if line.startswith(b"data: "))
    assert json.loads(first[6:])["object"] == "chat.completion.chunk"
    r.close()

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        now = requests.get(health, timeout=5).json()["streams"]
        if now["aborted"] > before["aborted"]:
            break
        time.sleep(0.1)
    assert now["aborted"] == before["aborted"] + 1, (before, now)
    assert now["completed"] == before["completed"], "the backend streamed to the end"


def test_backend_error_mid_request_in_stream_is_template(streaming_gw, helpers):
    r = stream(streaming_gw, helpers.KEY, "va", headers={"X-Demo-Status": "400"})
    err = helpers.assert_error(r, 400, "invalid_request")
    assert "injected status 400" in err["message"]


# ---- the official openai client --------------------------------------------------------

@pytest.fixture
def client(streaming_gw, helpers):
    return openai.OpenAI(base_url=streaming_gw.url + "/v1", api_key=helpers.KEY,
                         max_retries=0, timeout=10)


@pytest.mark.parametrize("model, answer", [("llm", "echo: "), ("va", "A: ")])
def test_openai_client_chat(client, model, answer):
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": TEXT}])
    assert reply.choices[0].message.content == answer + TEXT
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.total_tokens > 0


@pytest.mark.parametrize("model, answer", [("llm", "echo: "), ("v2", "v2: "), ("va", "A: ")])
def test_openai_client_stream(client, model, answer):
    chunks = list(client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": TEXT}], stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == answer + TEXT
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


def test_openai_client_embeddings_and_models(client):
    emb = client.embeddings.create(model="llm", input=["a", TEXT])
    assert [len(d.embedding) for d in emb.data] == [8, 8]
    assert sorted(m.id for m in client.models.list()) == ["kv1", "llm", "v2", "va"]
    assert client.models.retrieve("v2").id == "v2"


def test_openai_client_errors(client, streaming_gw, helpers):
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="nope", messages=[{"role": "user",
                                                                "content": "x"}])
    assert "nope" in exc.value.message
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="va", input="x")
    limited = openai.OpenAI(base_url=streaming_gw.url + "/v1", api_key=helpers.KEY_LIMITED,
                            max_retries=0, timeout=10)
    with pytest.raises(openai.PermissionDeniedError):
        limited.chat.completions.create(model="llm", messages=[{"role": "user",
                                                                "content": "x"}])


def test_token_metered_plan_on_converted_answers(gateway, helpers, protocol_backends):
    """Token accounting reads the converted answer: usage the gateway reports (here
    estimated from words) is what the plan is charged, streams included."""
    key = "sk-test-metered-convert-0123456789"
    b = protocol_backends
    snap = helpers.make_snapshot(1, {
        "va": (5000, [b["vendor-a"].entry(1, protocol="vendor", mapping="vendor-a")]),
        "v2": (5000, [b["kserve_v2"].entry(2)])}, mappings=MAPPINGS)
    snap["consumers"]["3"] = {"id": 3, "name": "metered", "allowed_models": None,
                              "plan_id": 4}
    snap["keys"][helpers.key_hash(key)] = {"id": 9, "consumer_id": 3, "prefix": key[:10],
                                          "expires_at": None}
    snap["plans"] = {"4": {"id": 4, "name": "metered", "rate_per_second": 1000,
                           "monthly_tokens": 100_000}}
    assert gateway.push(snap).status_code == 200
    for model in ("va", "v2"):
        r = requests.post(gateway.url + "/v1/chat/completions", timeout=10,
                          headers={"Authorization": f"Bearer {key}"},
                          json={"model": model, "max_tokens": 10,
                                "messages": [{"role": "user", "content": "one two"}]})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["total_tokens"] > 0
        evs = events(stream(gateway, key, model, stream_options={"include_usage": True}))
        assert evs[-1] == "[DONE]" and evs[-2]["usage"]["total_tokens"] > 0
