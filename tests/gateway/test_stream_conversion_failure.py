"""A stream converted frame by frame (OpenAI caller, KServe v2 backend) whose first
frame cannot be converted reaches the caller as a real 502 in the error template,
not as a 200: the gateway holds the status until the first frame converted or
failed (lua/sluice/relay.lua). Once a frame went out, a later failure is an SSE
error event in OpenAI's stream shape, then [DONE]."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest
import requests

from gateway_readings import access_lines
from waiting import eventually


class _V2Stream(BaseHTTPRequestHandler):
    """A KServe v2 generate_stream backend; X-Frames picks what it streams: good,
    bad-first (an error frame first), bad-later (two words, then an error frame),
    slow (40 words, 100 ms apart; counts streams cut short in server.aborted),
    stall (answers after 2 s)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        kind = self.headers.get("X-Frames", "good")
        if kind == "stall":   # past the model's timeout, before any header
            time.sleep(2)
        words = {"good": ["one", " two"], "bad-first": [], "bad-later": ["one", " two"],
                 "slow": [" w"] * 40, "stall": ["late"]}[kind]
        frames = [{"model_name": "m", "text_output": w} for w in words]
        if kind.startswith("bad"):
            frames.append({"error": "model exploded"})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Backend-Note", kind)
        self.end_headers()
        try:
            for frame in frames:
                data = b"data: " + json.dumps(frame).encode() + b"\n\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                if kind == "slow":
                    time.sleep(0.1)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.server.aborted += 1

    def log_message(self, *args):
        pass


@pytest.fixture
def v2(gateway, helpers, backends):
    """`v2` on the test's backend; `v2-stalls` on it too, with a 300 ms timeout and
    `fast` (openai-a) as its fallback; `fast-then-v2` times out on openai-a (asked for
    a 2 s latency) and falls back to `v2`."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _V2Stream)
    server.aborted = 0
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    port = server.server_address[1]
    b = {"id": 1, "name": "v2s", "protocol": "kserve_v2", "scheme": "http",
         "host": "127.0.0.1", "port": port, "host_header": f"127.0.0.1:{port}",
         "base_path": "", "weight": 1}
    snap = helpers.make_snapshot(1, {"v2": (5000, [b]), "v2-stalls": (300, [b]),
                                     "fast": (5000, [backends["openai-a"].entry(2)]),
                                     "fast-then-v2": (300, [backends["openai-a"].entry(3)])})
    snap["models"]["v2-stalls"]["fallback_model"] = "fast"
    snap["models"]["fast-then-v2"]["fallback_model"] = "v2"
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    yield gateway, server
    server.shutdown()
    server.server_close()


def stream(gw, helpers, frames, rid=None, model="v2", headers=None):
    headers = {"Authorization": f"Bearer {helpers.KEY}", "X-Frames": frames,
               **(headers or {})}
    if rid:
        headers["X-Request-Id"] = rid
    return requests.post(gw.url + "/v1/chat/completions", headers=headers, timeout=10,
                         stream=True, json={"model": model, "stream": True,
                                            "messages": [{"role": "user", "content": "hi"}]})


def events(r):
    return [line[6:].decode() for line in r.iter_lines() if line.startswith(b"data: ")]


def test_good_stream_goes_out_converted_with_the_backends_headers(v2, helpers):
    gw, _ = v2
    r = stream(gw, helpers, "good", rid="v2-good")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    assert r.headers["X-Backend-Note"] == "good" and r.headers["X-Request-Id"] == "v2-good"
    evs = events(r)
    assert evs[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in evs[:-1])
    assert text == "one two"
    line = eventually(lambda: [l for l in access_lines(gw, 1, timeout=0.5)
                               if l["request_id"] == "v2-good"], 10)[0]
    assert line["status"] == "200" and line["backend"] == "v2s" and line["upstream_ms"]


def test_first_frame_that_cannot_be_converted_is_a_real_502(v2, helpers):
    gw, _ = v2
    r = stream(gw, helpers, "bad-first", rid="v2-bad-first")
    err = helpers.assert_error(r, 502, "backend_error")
    assert err["message"] == "cannot convert the backend answer: model exploded"
    line = eventually(lambda: [l for l in access_lines(gw, 1, timeout=0.5)
                               if l["request_id"] == "v2-bad-first"], 10)[0]
    assert line["status"] == "502" and line["error_type"] == "backend_error"


def test_later_failure_is_an_error_event_and_the_end(v2, helpers):
    gw, _ = v2
    r = stream(gw, helpers, "bad-later")
    assert r.status_code == 200
    evs = events(r)
    assert evs[-1] == "[DONE]"
    err = json.loads(evs[-2])["error"]
    assert err["code"] == 502 and err["type"] == "backend_error"
    assert err["message"] == "cannot convert the backend answer: model exploded"
    assert err["request_id"] == r.headers["X-Request-Id"]
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in evs[:-2])
    assert text == "one two"


def test_openai_client_raises_on_either_failure(v2, helpers):
    gw, _ = v2
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=helpers.KEY, max_retries=0,
                           timeout=10)
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="v2", messages=msgs, stream=True,
                                       extra_headers={"X-Frames": "bad-first"})
    assert info.value.status_code == 502
    chunks = client.chat.completions.create(model="v2", messages=msgs, stream=True,
                                            extra_headers={"X-Frames": "bad-later"})
    with pytest.raises(openai.APIError, match="model exploded"):
        for _ in chunks:
            pass


def test_caller_hanging_up_cuts_the_backend_stream(v2, helpers):
    gw, server = v2
    r = stream(gw, helpers, "slow")
    first = next(line for line in r.iter_lines() if line.startswith(b"data: "))
    assert json.loads(first[6:])["object"] == "chat.completion.chunk"
    r.close()
    eventually(lambda: server.aborted == 1, 15)


def logged(gw, rid):
    return eventually(lambda: [line for line in access_lines(gw, 1, timeout=0.5)
                               if line["request_id"] == rid], 10)[0]


def test_relayed_stream_that_times_out_falls_back(v2, helpers):
    gw, _ = v2
    r = stream(gw, helpers, "stall", rid="stall-then-fast", model="v2-stalls")
    assert r.status_code == 200
    assert r.headers["X-Sluice-Fallback"] == "fast"
    evs = events(r)
    assert evs[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["delta"].get("content", "")
                   for e in evs[:-1]) == "echo: hi"
    # one line, with both passes' attempts: the relayed stream's, timed out after
    # 300 ms, then the fallback's, proxied from the public request
    line = logged(gw, "stall-then-fast")
    assert line["status"] == "200" and line["fallback"] == "fast"
    assert float(line["upstream_ms"]) >= 290


def test_fallback_stream_whose_first_frame_fails_is_a_real_502(v2, helpers):
    gw, _ = v2
    r = stream(gw, helpers, "bad-first", rid="fast-then-bad", model="fast-then-v2",
               headers={"X-Demo-Latency-Ms": "2000"})
    err = helpers.assert_error(r, 502, "backend_error")
    assert err["message"] == "cannot convert the backend answer: model exploded"
    assert r.headers["X-Sluice-Fallback"] == "v2"
    # one line, with both passes' attempts: the proxied stream's, timed out after
    # 300 ms, then the relayed fallback's
    line = logged(gw, "fast-then-bad")
    assert line["status"] == "502" and line["fallback"] == "v2"
    assert float(line["upstream_ms"]) >= 290
