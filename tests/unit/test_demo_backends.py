"""The demo backends speak their protocols and inject the faults tests rely on."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
import requests

from control_plane.demo.backends import prediction, serve
from control_plane.runtime.procs import free_port, spawn, stop, wait_http


@pytest.fixture
def openai_backend():
    server = serve("openai", "127.0.0.1", 0, "oa-1")
    yield server
    server.shutdown()


@pytest.fixture
def predict_backend():
    server = serve("predict", "127.0.0.1", 0, "pr-1")
    yield server
    server.shutdown()


def chat(url, content="hello world", **extra):
    body = {"model": "chat-demo", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": content}], **extra}
    return requests.post(url + "/v1/chat/completions", json=body, timeout=5)


def sse_events(resp):
    """Parsed `data:` payloads of an SSE response, in order ([DONE] kept as a str)."""
    events = []
    for line in resp.iter_lines():
        if line.startswith(b"data: "):
            data = line[len(b"data: "):]
            events.append(data.decode() if data == b"[DONE]" else json.loads(data))
    return events


def test_health_names_the_backend(openai_backend):
    resp = requests.get(openai_backend.url + "/health", timeout=5)
    assert resp.status_code == 200
    assert resp.json()["status"] == "ok" and resp.json()["name"] == "oa-1"
    assert resp.headers["X-Demo-Backend"] == "oa-1"


def test_chat_completion_shape(openai_backend):
    resp = chat(openai_backend.url)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"] == "application/json"
    body = resp.json()
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert body["model"] == "chat-demo"
    assert isinstance(body["created"], int)
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "echo: hello world"}
    assert choice["finish_reason"] == "stop"
    # words: "be brief" + "hello world" in, "echo: hello world" out
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}


def test_non_ascii_echo_is_byte_exact(openai_backend):
    text = "你好，世界 🚀 café"
    resp = chat(openai_backend.url, text)
    assert resp.json()["choices"][0]["message"]["content"] == "echo: " + text
    assert ("echo: " + text).encode("utf-8") in resp.content  # not \u-escaped


def test_openai_python_client_accepts_answers(openai_backend):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=openai_backend.url + "/v1", api_key="sk-x")
    out = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi there"}])
    assert out.choices[0].message.content == "echo: hi there"
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi there"}], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) \
        == "echo: hi there"


def test_stream_chunks_in_order(openai_backend):
    resp = chat(openai_backend.url, "one two three", stream=True,
                stream_options={"include_usage": True})
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert resp.headers["Transfer-Encoding"] == "chunked"
    events = sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = [c["choices"][0]["delta"].get("content") for c in chunks[1:-2]]
    assert content == ["echo: ", "one ", "two ", "three"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 4


def test_stream_without_usage_has_no_usage_chunk(openai_backend):
    events = sse_events(chat(openai_backend.url, "a b", stream=True))
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in e for e in events[:-1])


def test_first_chunk_arrives_before_stream_ends(openai_backend):
    body = {"model": "m", "stream": True,
            "messages": [{"role": "user", "content": "a b c d"}]}
    start = time.monotonic()
    with requests.post(openai_backend.url + "/v1/chat/completions", json=body,
                       headers={"X-Demo-Chunk-Delay-Ms": "100"}, stream=True,
                       timeout=5) as resp:
        lines = resp.iter_lines()
        first = next(line for line in lines if line)
        first_at = time.monotonic() - start
        rest = [line for line in lines if line]
        end_at = time.monotonic() - start
    assert first.startswith(b"data: ")
    assert rest[-1] == b"data: [DONE]"
    assert first_at < 0.1
    assert end_at >= 0.5  # six chunks after the first, 100 ms apart


def test_status_override_uses_openai_error_shape(openai_backend):
    resp = requests.post(openai_backend.url + "/v1/chat/completions",
                         json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                         headers={"X-Demo-Status": "429"}, timeout=5)
    assert resp.status_code == 429
    assert resp.json()["error"]["type"] == "rate_limit_error"
    assert resp.headers["X-Demo-Backend"] == "oa-1"


def test_latency_override(openai_backend):
    start = time.monotonic()
    resp = requests.get(openai_backend.url + "/health",
                        headers={"X-Demo-Latency-Ms": "200"}, timeout=5)
    assert resp.status_code == 200
    assert time.monotonic() - start >= 0.2


def test_failure_rate_is_seeded_and_roughly_right():
    server = serve("openai", "127.0.0.1", 0, "flaky", failure_rate=0.5, seed=7)
    try:
        codes = [chat(server.url).status_code for _ in range(60)]
        health = requests.get(server.url + "/health", timeout=5).status_code
    finally:
        server.shutdown()
    assert set(codes) == {200, 500}
    assert 15 <= codes.count(500) <= 45
    assert health == 200  # health checks are exempt


def test_full_failure_rate_answers_500_in_protocol_shape():
    server = serve("predict", "127.0.0.1", 0, "down", failure_rate=1.0)
    try:
        resp = requests.post(server.url + "/v1/models/m/predict",
                             json={"instances": [1]}, timeout=5)
    finally:
        server.shutdown()
    assert resp.status_code == 500
    assert resp.json()["backend"] == "down" and "error" in resp.json()


def test_headers_report_credentials_and_request_id(openai_backend):
    plain = chat(openai_backend.url)
    assert plain.headers["X-Demo-Saw-Authorization"] == "no"
    assert "X-Demo-Request-Id" not in plain.headers
    for header in ({"Authorization": "Bearer sk-1"}, {"X-API-Key": "sk-1"}):
        resp = requests.get(openai_backend.url + "/v1/models",
                            headers={**header, "X-Request-Id": "req-42"}, timeout=5)
        assert resp.headers["X-Demo-Saw-Authorization"] == "yes"
        assert resp.headers["X-Demo-Request-Id"] == "req-42"


def test_errors_unknown_path_and_bad_json(openai_backend):
    missing = requests.get(openai_backend.url + "/nope", timeout=5)
    assert missing.status_code == 404 and "error" in missing.json()
    bad = requests.post(openai_backend.url + "/v1/chat/completions", data=b"{nope",
                        headers={"Content-Type": "application/json"}, timeout=5)
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"
    no_messages = requests.post(openai_backend.url + "/v1/chat/completions",
                                json={"model": "m"}, timeout=5)
    assert no_messages.status_code == 400


def test_models_list(openai_backend):
    body = requests.get(openai_backend.url + "/v1/models", timeout=5).json()
    assert body["object"] == "list" and body["data"][0]["id"] == "oa-1"


def test_predict_shape_is_deterministic(predict_backend):
    url = predict_backend.url + "/v1/models/sentiment/predict"
    body = {"instances": ["good movie", "狗", {"x": 1}]}
    first = requests.post(url, json=body, timeout=5)
    second = requests.post(url, json=body, timeout=5)
    assert first.status_code == 200
    assert first.headers["X-Demo-Backend"] == "pr-1"
    out = first.json()
    assert out["model"] == "sentiment" and out["backend"] == "pr-1"
    assert [p["length"] for p in out["predictions"]] == [10, 1, 1]
    assert all(p["label"] in ("negative", "neutral", "positive") and 0 <= p["score"] < 1
               for p in out["predictions"])
    assert out["predictions"] == second.json()["predictions"]
    assert requests.post(url, json={"input": "good movie"}, timeout=5).json()[
        "predictions"] == [prediction("good movie")]


def test_predict_errors(predict_backend):
    url = predict_backend.url + "/v1/models/m/predict"
    assert requests.post(url, json=[1, 2], timeout=5).status_code == 400
    assert requests.post(url, json={"other": 1}, timeout=5).status_code == 400
    assert requests.post(url, data=b"\xff\xfe", timeout=5).status_code == 400
    injected = requests.post(url, json={"instances": [1]},
                             headers={"X-Demo-Status": "503"}, timeout=5)
    assert injected.status_code == 503 and injected.json()["backend"] == "pr-1"
    # a chat path on a predict backend is unknown
    assert requests.post(predict_backend.url + "/v1/chat/completions",
                         json={}, timeout=5).status_code == 404


def test_keepalive_and_chunked_request_body(predict_backend):
    """Two requests on one connection, the first with a chunked body (as nginx sends
    with proxy_request_buffering off)."""
    payload = b'{"instances": ["ab"]}'
    request = (b"POST /v1/models/m/predict HTTP/1.1\r\nHost: x\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n"
               + b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload)
               + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    with socket.create_connection(("127.0.0.1", predict_backend.port), timeout=5) as s:
        s.sendall(request)
        data = b""
        while data.count(b"HTTP/1.1 200") < 2 or not data.endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK") == 2
    assert b'"length": 2' in data


def test_cli_runs_as_module(tmp_path):
    port = free_port()
    proc = spawn([sys.executable, "-m", "control_plane.demo.backends", "--protocol",
                  "predict", "--port", str(port), "--name", "cli-1"],
                 log=tmp_path / "backend.log")
    try:
        resp = wait_http(f"http://127.0.0.1:{port}/health", timeout=10, proc=proc)
        assert resp.json()["name"] == "cli-1"
    finally:
        stop(proc)
    assert proc.returncode is not None


def test_cli_rejects_unknown_protocol():
    out = subprocess.run([sys.executable, "-m", "control_plane.demo.backends",
                          "--protocol", "grpc", "--port", "1"], capture_output=True)
    assert out.returncode == 2 and b"invalid choice" in out.stderr


def test_sluice_demo_backend_command_takes_the_backend_options():
    """`sluice demo-backend --protocol ... --port ...`, as the README and compose file
    run it."""
    import sys

    from control_plane.runtime import procs

    port = procs.free_port()
    proc = procs.spawn([sys.executable, "-m", "control_plane.cli", "demo-backend",
                        "--protocol", "predict", "--port", str(port), "--name", "cli-made"])
    try:
        r = procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
        assert r.json()["name"] == "cli-made"
    finally:
        procs.stop(proc)


@pytest.mark.parametrize("fmt", ["vllm", "triton", "dcgm"])
def test_metrics_endpoint_speaks_each_servers_prometheus_shape(fmt):
    from control_plane.demo.metrics import DemoMetrics
    from control_plane.services import prom_text

    server = serve("openai", "127.0.0.1", 0, "m-1")
    server.metrics = DemoMetrics(fmt, "m-1", used=0.25)
    try:
        r = requests.get(server.url + "/metrics", timeout=5)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
        assert prom_text.parse(r.text, fmt).free_fraction == pytest.approx(0.75)
        bad = requests.post(server.url + "/demo/metrics", json={"used": 1.5}, timeout=5)
        assert bad.status_code == 400 and "used" in bad.json()["error"]
        assert requests.post(server.url + "/demo/metrics", json={"used": 0.5},
                             timeout=5).json()["used"] == 0.5
        r = requests.get(server.url + "/metrics", timeout=5)
        assert prom_text.parse(r.text, fmt).free_fraction == pytest.approx(0.5)
    finally:
        server.shutdown()


def test_no_metrics_endpoint_unless_asked(openai_backend):
    assert requests.get(openai_backend.url + "/metrics", timeout=5).status_code == 404
