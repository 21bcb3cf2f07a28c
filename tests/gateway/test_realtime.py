"""GET /v1/realtime through a real gateway to the demo realtime backend
(control_plane/demo/realtime.py, a real WebSocket server): the official openai
client's realtime connection, the browser's subprotocol key, refusals before the
upgrade, HTTPS, a reload, metrics, and a backend that dies mid-session. The plan's
caps, limits and usage: test_realtime_limits.py."""
from __future__ import annotations

import base64
import binascii
import json
import secrets
import signal
import ssl

import pytest
import requests
from openai import OpenAI
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from control_plane.runtime import procs
from control_plane.runtime.certs import CertAuthority
from control_plane.runtime.nginx_conf import GatewayConfig
from gateway_readings import scrape, value
from realtime_session import (line_of, realtime_backends, snapshot,  # noqa: F401
                              start_realtime, upgrade_headers, ws_url)
from waiting import eventually

AUDIO = bytes(range(256)) * 40     # 10,240 bytes of "speech"


@pytest.fixture
def served(gateway, helpers, backends, realtime_backends):
    r = gateway.push(snapshot(helpers, backends, realtime_backends))
    assert r.status_code == 200, r.text
    return gateway


def collect_until_done(conn) -> list:
    events = []
    for event in conn:
        events.append(event)
        if event.type == "response.done":
            return events
    raise AssertionError(f"the session ended before response.done: {events}")


def test_openai_client_sends_audio_and_gets_events_back(served, helpers):
    client = OpenAI(base_url=served.url + "/v1", api_key=helpers.KEY, max_retries=0)
    request_id = "rt-openai-" + secrets.token_hex(8)
    with client.realtime.connect(model="rt-demo", max_retries=0,
                                 extra_headers={"X-Request-Id": request_id}) as conn:
        created = conn.recv()
        assert created.type == "session.created"
        conn.session.update(session={"type": "realtime", "output_modalities": ["audio"]})
        assert conn.recv().type == "session.updated"
        for i in range(0, len(AUDIO), 4096):   # streamed in chunks, as a microphone does
            conn.input_audio_buffer.append(audio=base64.b64encode(AUDIO[i:i + 4096]).decode())
        conn.input_audio_buffer.commit()
        conn.response.create()
        events = collect_until_done(conn)
    kinds = [e.type for e in events]
    heard = f"audio of {len(AUDIO)} bytes crc {binascii.crc32(AUDIO):08x}"
    assert "response.created" in kinds and "response.output_audio.delta" in kinds
    transcript = "".join(e.delta for e in events
                         if e.type == "response.output_audio_transcript.delta")
    assert transcript == "echo: " + heard
    audio_out = b"".join(base64.b64decode(e.delta) for e in events
                         if e.type == "response.output_audio.delta")
    assert len(audio_out) == 480 * len(transcript.split())   # 10 ms of PCM16 a word
    usage = events[-1].response.usage
    assert usage.input_tokens == len(heard.split()) + len(AUDIO) // 100

    line = line_of(served, request_id)
    sent = 1 + 3 + 1 + 1          # session.update, 3 appends, commit, response.create
    assert line["status"] == "101" and line["backend"] in ("rt-a", "rt-b")
    assert line["closed_by"] == "client" and line["close_code"] == "1000"
    assert line["realtime_events_in"] == str(sent)
    # session.created and .updated, then committed, item.created and the response's
    assert line["realtime_events_out"] == str(2 + len(events))
    assert int(line["realtime_bytes_in"]) > len(AUDIO) * 4 // 3
    assert line["prompt_tokens"] == str(usage.input_tokens)
    assert line["completion_tokens"] == str(usage.output_tokens)
    assert float(line["realtime_duration_ms"]) > 0


def test_browser_key_in_subprotocol_is_taken_and_never_passed_on(served, helpers):
    offered = ["realtime", "openai-insecure-api-key." + helpers.KEY, "openai-beta.realtime-v1"]
    with connect(ws_url(served), subprotocols=offered) as ws:
        request_id = ws.response.headers["X-Request-Id"]
        assert ws.subprotocol == "realtime"   # one of those offered, never the key
        assert json.loads(ws.recv())["type"] == "session.created"
        ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "hello there"}]}}))
        ws.send(json.dumps({"type": "session.update",
                            "session": {"output_modalities": ["text"]}}))
        ws.send(json.dumps({"type": "response.create"}))
        deltas, seen = [], None
        while True:
            event = json.loads(ws.recv())
            if event["type"] == "session.updated":
                seen = event["session"]["demo_offered_protocols"]
            if event["type"] == "response.output_text.delta":
                deltas.append(event["delta"])
            if event["type"] == "response.done":
                break
    assert "".join(deltas) == "echo: hello there"
    assert seen == ["realtime", "openai-beta.realtime-v1"]   # what the backend was offered
    line = line_of(served, request_id)
    assert line["consumer"] == "alice"
    for log in (served.prefix / "logs" / "access.log", served.error_log):
        assert helpers.KEY not in log.read_text()


@pytest.mark.parametrize("path, headers, status, err_type, param", [
    ("/v1/realtime?model=rt-demo", {}, 401, "unauthorized", None),
    ("/v1/realtime?model=rt-demo", {"Sec-WebSocket-Protocol": "realtime"}, 401,
     "unauthorized", None),
    ("/v1/realtime?model=rt-demo", {"Authorization": "Bearer sk-nobody-0123456789abcdef"},
     403, "forbidden", None),
    ("/v1/realtime?model=chat-demo", {"Authorization": "Bearer {key}"}, 400,
     "invalid_request", "model"),
    ("/v1/realtime", {"Authorization": "Bearer {key}"}, 400, "invalid_request", "model"),
    ("/v1/realtime?model=nope", {"Authorization": "Bearer {key}"}, 404, "not_found", None),
])
def test_refused_before_the_upgrade_in_the_error_template(served, helpers, path, headers,
                                                          status, err_type, param):
    headers = {k: v.format(key=helpers.KEY) for k, v in headers.items()}
    r = requests.get(served.url + path, headers=upgrade_headers(**headers), timeout=5)
    err = helpers.assert_error(r, status, err_type)
    assert err.get("param") == param
    line = line_of(served, err["request_id"])
    assert line["status"] == str(status) and line["backend"] == ""


def test_official_client_sees_the_refusal(served):
    client = OpenAI(base_url=served.url + "/v1", api_key="sk-nobody-0123456789abcdef",
                    max_retries=0)
    with pytest.raises(Exception) as caught:
        with client.realtime.connect(model="rt-demo", max_retries=0) as conn:
            conn.recv()
    assert "403" in str(caught.value)


def test_sessions_gauge_and_durations(served, helpers):
    auth = {"Authorization": f"Bearer {helpers.KEY}"}
    before = scrape(served)
    done = sum(s.value for s in before.get("sluice_realtime_session_duration_seconds_count", [])
               if s.labels["model"] == "rt-demo")
    with connect(ws_url(served), additional_headers=auth) as ws:
        ws.recv()
        assert eventually(lambda: value(scrape(served), "sluice_realtime_sessions",
                                        model="rt-demo") == 1, timeout=5)
    assert eventually(lambda: value(scrape(served), "sluice_realtime_sessions",
                                    model="rt-demo") == 0, timeout=5)

    def counted():
        after = scrape(served)
        return sum(s.value for s in after["sluice_realtime_session_duration_seconds_count"]
                   if s.labels["model"] == "rt-demo") == done + 1
    assert eventually(counted, timeout=5)


def test_backend_dying_mid_session_closes_1011_and_counts(gateway, helpers, backends,
                                                          tmp_path):
    port, proc = start_realtime("rt-doomed", tmp_path)
    try:
        # an id of its own: the breaker's window holds the other tests' sessions
        r = gateway.push(snapshot(helpers, backends, {"rt-doomed": port}, first_id=99,
                                  breaker={"min_requests": 1, "error_threshold": 0.5,
                                           "cooldown_s": 60}))
        assert r.status_code == 200, r.text
        auth = {"Authorization": f"Bearer {helpers.KEY}"}
        with connect(ws_url(gateway), additional_headers=auth) as ws:
            request_id = ws.response.headers["X-Request-Id"]
            assert json.loads(ws.recv())["type"] == "session.created"
            proc.send_signal(signal.SIGKILL)
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
        assert closed.value.rcvd.code == 1011
    finally:
        procs.stop(proc)
    line = line_of(gateway, request_id)
    assert line["closed_by"] == "backend" and line["close_code"] == "1011"
    # the breaker counted the failure: one failure of one opens it at these settings
    assert eventually(lambda: value(scrape(gateway), "sluice_backend_circuit_state",
                                    model="rt-demo", backend="rt-doomed") == 1, timeout=5)
    r = requests.get(ws_url(gateway).replace("ws://", "http://"),
                     headers=upgrade_headers(Authorization=f"Bearer {helpers.KEY}"), timeout=5)
    helpers.assert_error(r, 503, "backend_unavailable")


def test_http_endpoints_never_reach_a_realtime_backend(served, helpers):
    r = helpers.chat(served, model="rt-demo")
    err = helpers.assert_error(r, 400, "invalid_request")
    assert err["param"] == "model" and "/v1/realtime" in err["message"]


def test_a_plain_get_is_not_an_upgrade(served, helpers):
    r = requests.get(ws_url(served).replace("ws://", "http://"), timeout=5,
                     headers={"Authorization": f"Bearer {helpers.KEY}"})
    err = helpers.assert_error(r, 400, "invalid_request")
    assert "Upgrade: websocket" in err["message"]


def test_a_reload_closes_open_sessions_1001(served, helpers):
    auth = {"Authorization": f"Bearer {helpers.KEY}"}
    with connect(ws_url(served), additional_headers=auth) as ws:
        ws.recv()
        served.reload()   # old workers go; their sessions must not hold them
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd.code == 1001
    with connect(ws_url(served), additional_headers=auth) as ws:
        assert json.loads(ws.recv())["type"] == "session.created"   # the new workers serve


def test_a_session_over_the_https_listener(gateway_factory, prefix, helpers, backends,
                                           realtime_backends):
    ca = CertAuthority.create(prefix / "pki")
    cert, key = ca.issue(prefix / "pki", "server", ["127.0.0.1", "localhost"])
    port, internal_port, tls_port = procs.free_ports(3)
    gw = gateway_factory(GatewayConfig(prefix=prefix / "gw", port=port,
                                       internal_port=internal_port, tls_port=tls_port,
                                       tls_cert=cert, tls_key=key,
                                       token=secrets.token_urlsafe(24)))
    assert gw.push(snapshot(helpers, backends, realtime_backends)).status_code == 200
    trust = ssl.create_default_context(cafile=str(ca.cert))
    url = gw.tls_url.replace("https://", "wss://") + "/v1/realtime?model=rt-demo"
    with connect(url, ssl=trust, subprotocols=["realtime", "openai-insecure-api-key."
                                               + helpers.KEY]) as ws:
        assert json.loads(ws.recv())["type"] == "session.created"
        ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
        assert json.loads(ws.recv())["type"] == "input_audio_buffer.cleared"


@pytest.mark.parametrize("code, counted_as_failure", [(1000, False), (1011, True)])
def test_a_backends_close_frame_reaches_the_caller(served, helpers, code, counted_as_failure):
    auth = {"Authorization": f"Bearer {helpers.KEY}"}
    before = served.stats()["backends"]
    with connect(ws_url(served), additional_headers=auth) as ws:
        request_id = ws.response.headers["X-Request-Id"]
        ws.recv()
        ws.send(json.dumps({"type": "demo.close", "code": code, "reason": "bye"}))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (code, "bye")
    line = line_of(served, request_id)
    assert line["closed_by"] == "backend" and line["close_code"] == str(code)
    # the backend's own 1011 is a failure in its stats (and breaker), a 1000 a success
    backend_id = {"rt-a": "10", "rt-b": "11"}[line["backend"]]
    field = "failures" if counted_as_failure else "successes"
    assert eventually(lambda: served.stats()["backends"][backend_id][field]
                      == before[backend_id][field] + 1, timeout=5)
