"""GET /v1/realtime and a consumer's plan, a model and its backends: sessions at once,
session length, idle sessions, backends' max_in_flight, a slot given back after a
refusal, and what a session counts in usage and against monthly_tokens."""
from __future__ import annotations

import json
import os
import socket
import struct
import time

import pytest
import requests
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from realtime_session import (PLAN_KEY, line_of, realtime_backends, snapshot,  # noqa: F401
                              upgrade_headers, ws_url)
from gateway_readings import scrape
from waiting import eventually


@pytest.fixture
def served(gateway, helpers, backends, realtime_backends):
    r = gateway.push(snapshot(helpers, backends, realtime_backends,
                              plan={"rate_per_second": 100, "realtime_sessions": 1,
                                    "realtime_session_s": 2}))
    assert r.status_code == 200, r.text
    return gateway


def test_plan_caps_concurrent_sessions(served):
    auth = {"Authorization": f"Bearer {PLAN_KEY}"}
    with connect(ws_url(served), additional_headers=auth) as first:
        assert json.loads(first.recv())["type"] == "session.created"
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url(served), additional_headers=auth)
        assert refused.value.response.status_code == 429
        assert json.loads(refused.value.response.body)["error"]["type"] == "rate_limited"

    def third_opens():
        with connect(ws_url(served), additional_headers=auth) as ws:
            return json.loads(ws.recv())["type"] == "session.created"
    assert eventually(third_opens, timeout=5)


def test_plan_caps_session_length(served):
    auth = {"Authorization": f"Bearer {PLAN_KEY}"}
    with connect(ws_url(served), additional_headers=auth) as ws:
        request_id = ws.response.headers["X-Request-Id"]
        ws.recv()
        with pytest.raises(ConnectionClosed) as closed:
            while True:   # kept busy: only the length cap can end it
                ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
                ws.recv(timeout=5)
    assert closed.value.rcvd.code == 1008
    line = line_of(served, request_id)
    assert line["closed_by"] == "gateway" and line["close_code"] == "1008"
    assert 2000 <= int(line["realtime_duration_ms"]) < 4000


def test_idle_session_is_closed_at_the_models_timeout(gateway, helpers, backends,
                                                      realtime_backends):
    r = gateway.push(snapshot(helpers, backends, realtime_backends, timeout_ms=1000))
    assert r.status_code == 200, r.text
    auth = {"Authorization": f"Bearer {helpers.KEY}"}
    with connect(ws_url(gateway), additional_headers=auth) as ws:
        ws.recv()
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd.code == 1000 and closed.value.rcvd.reason == "idle timeout"


def say_hello(url: str, key: str) -> None:
    """One session: "hello there" in, "echo: hello there" out (5 tokens in all)."""
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        ws.recv()
        ws.send(json.dumps({"type": "session.update", "session": {"output_modalities": ["text"]}}))
        ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "hello there"}]}}))
        ws.send(json.dumps({"type": "response.create"}))
        while json.loads(ws.recv())["type"] != "response.done":
            pass


def test_monthly_tokens_reserve_for_a_session_and_charge_what_it_used(gateway, helpers, backends,
                                                                      realtime_backends):
    key = "sk-test-realtime-tokens-0123456789"
    snap = snapshot(helpers, backends, realtime_backends)
    snap["consumers"]["4"] = {"id": 4, "name": "metered", "allowed_models": None, "plan_id": 8}
    snap["keys"][helpers.key_hash(key)] = {"id": 12, "consumer_id": 4, "prefix": key[:10],
                                           "expires_at": None}
    # room for a session's reservation (1024: no max_tokens) and 10 tokens more
    snap["plans"] = {"8": {"id": 8, "name": "metered", "rate_per_second": 100,
                           "monthly_tokens": 1024 + 10}}
    assert gateway.push(snap).status_code == 200

    def status() -> int:
        try:
            with connect(ws_url(gateway), additional_headers={"Authorization": f"Bearer {key}"}):
                return 101
        except InvalidStatus as refused:
            return refused.response.status_code

    # each session is charged its 5 tokens, not its reservation: three fit (0, 5 and 10
    # used before them), the fourth's reservation no longer does. (A session's
    # settlement follows its close by a moment: a start refused meanwhile is retried.)
    for _ in range(3):
        assert eventually(lambda: say_hello(ws_url(gateway), key) or True, timeout=5)
    row = f"{time.strftime('%Y%m%d', time.gmtime())}|4|rt-demo"
    assert eventually(lambda: gateway.usage()["counters"][row][3] == 15, timeout=5)  # settled
    assert status() == 429


def test_usage_counts_the_session_its_tokens_and_its_seconds(served):
    key = f"{time.strftime('%Y%m%d', time.gmtime())}|3|rt-demo"   # consumer 3: PLAN_KEY's
    before = served.usage()["counters"].get(key, [0] * 8)
    with connect(ws_url(served), additional_headers={"Authorization": f"Bearer {PLAN_KEY}"}) as ws:
        ws.recv()
        ws.send(json.dumps({"type": "session.update", "session": {"output_modalities": ["text"]}}))
        ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "hello there"}]}}))
        ws.send(json.dumps({"type": "response.create"}))
        while json.loads(ws.recv())["type"] != "response.done":
            pass
        time.sleep(1.2)   # a session of more than a second: counted as 2

    def grown():
        now = served.usage()["counters"].get(key, [0] * 8)
        return [a - b for a, b in zip(now, before)] if now[0] > before[0] else None
    delta = eventually(grown, timeout=5)
    # one session; "hello there" in, "echo: hello there" out; no audio, characters,
    # images; 2 seconds
    assert delta == [1, 2, 3, 5, 0, 0, 0, 2]


def test_tokens_of_a_response_done_in_fragments(served):
    """The backend sends response.done as a fragmented message (7-byte frames, its
    "type" split across them): the gateway passes the frames on as they come and still
    counts the tokens the whole message reports."""
    key = f"{time.strftime('%Y%m%d', time.gmtime())}|3|rt-demo"   # consumer 3: PLAN_KEY's
    before = served.usage()["counters"].get(key, [0] * 8)
    with connect(ws_url(served), additional_headers={"Authorization": f"Bearer {PLAN_KEY}"}) as ws:
        ws.recv()
        ws.send(json.dumps({"type": "session.update", "session": {
            "output_modalities": ["text"], "demo_fragment_bytes": 7}}))
        ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "hello there"}]}}))
        ws.send(json.dumps({"type": "response.create"}))
        while True:
            event = json.loads(ws.recv())
            if event["type"] == "response.done":
                break
        assert event["response"]["usage"]["total_tokens"] == 5

    def grown():
        now = served.usage()["counters"].get(key, [0] * 8)
        return [a - b for a, b in zip(now, before)] if now[0] > before[0] else None
    assert eventually(grown, timeout=5)[1:4] == [2, 3, 5]   # prompt, completion, total


def raw_session(gw, key: str) -> socket.socket:
    """A WebSocket session on a plain socket, upgraded, that reads only when told (a
    client library reads the socket on a thread of its own)."""
    host, port = gw.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)   # fills soon
    head = "".join(f"{k}: {v}\r\n" for k, v in upgrade_headers(
        Authorization=f"Bearer {key}", Host=f"{host}:{port}").items())
    sock.sendall(f"GET /v1/realtime?model=rt-demo HTTP/1.1\r\n{head}\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(1)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return sock


def send_text(sock: socket.socket, text: str) -> None:
    data, mask = text.encode(), os.urandom(4)
    head = bytes([0x81]) + (bytes([0x80 | len(data)]) if len(data) < 126
                            else bytes([0x80 | 126]) + struct.pack("!H", len(data)))
    sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def read_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    first, second = read_exact(sock, 2)
    n = second & 0x7f
    if n == 126:
        n = struct.unpack("!H", read_exact(sock, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", read_exact(sock, 8))[0]
    return first & 0x0f, read_exact(sock, n)


def test_a_slow_caller_gets_the_whole_event_then_the_close_frame(served):
    """A 12 MB event to a caller that is not reading when its session reaches the
    plan's length (2 s): the gateway's writer is mid-frame (the socket buffers are
    full); the frame is finished before the close frame goes after it, so the caller
    reads both intact."""
    sock = raw_session(served, PLAN_KEY)
    try:
        opcode, data = read_frame(sock)
        assert json.loads(data)["type"] == "session.created"
        send_text(sock, json.dumps({"type": "demo.large", "bytes": 12_000_000}))
        time.sleep(2.5)   # not reading: the length limit comes while the frame waits
        opcode, data = read_frame(sock)
        assert opcode == 0x1 and len(data) > 12_000_000
        assert json.loads(data)["type"] == "demo.large"
        opcode, data = read_frame(sock)
        assert opcode == 0x8, (opcode, data[:40])
        assert struct.unpack("!H", data[:2])[0] == 1008 and data[2:] == b"session length limit"
    finally:
        sock.close()


def test_no_backend_accepting_is_502_and_gives_the_session_slot_back(gateway, helpers, backends,
                                                                     dead_port):
    # the session of the test before (a slow caller's, closed at its length limit) may
    # still be giving its slot back: this test counts from none open
    assert eventually(lambda: sum(s.value for s in scrape(gateway).get(
        "sluice_realtime_sessions", [])) == 0, timeout=10)
    r = gateway.push(snapshot(helpers, backends, {"rt-dead": dead_port}, first_id=120,
                              plan={"rate_per_second": 100, "realtime_sessions": 1}))
    assert r.status_code == 200, r.text
    for _ in range(2):   # the plan allows one session: a slot kept would make this a 429
        r = requests.get(ws_url(gateway).replace("ws://", "http://"), timeout=10,
                         headers=upgrade_headers(Authorization=f"Bearer {PLAN_KEY}"))
        err = helpers.assert_error(r, 502, "backend_error")
        assert "accepted the session" in err["message"]


def test_open_sessions_count_against_the_backends_max_in_flight(gateway, helpers, backends,
                                                                 realtime_backends):
    snap = snapshot(helpers, backends, {"rt-a": realtime_backends["rt-a"]}, first_id=130)
    snap["models"]["rt-demo"]["backends"][0]["max_in_flight"] = 1
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    auth = {"Authorization": f"Bearer {helpers.KEY}"}
    with connect(ws_url(gateway), additional_headers=auth) as ws:
        ws.recv()
        with pytest.raises(InvalidStatus) as refused:   # no plan: no wait for a slot
            connect(ws_url(gateway), additional_headers=auth)
        assert refused.value.response.status_code == 503
        assert b"saturated" in refused.value.response.body

    def next_opens():
        with connect(ws_url(gateway), additional_headers=auth) as again:
            return json.loads(again.recv())["type"] == "session.created"
    assert eventually(next_opens, timeout=5)   # the closed session gave its count back
