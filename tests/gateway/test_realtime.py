"""GET /v1/realtime through a real gateway to the demo realtime backend
(control_plane/demo/realtime.py, a real WebSocket server): the official openai
client's realtime connection, the browser's subprotocol key, refusals before the
upgrade, the plan's caps, idle and overlong sessions, and a backend that dies
mid-session."""
from __future__ import annotations

import base64
import binascii
import json
import secrets
import signal
import ssl
import sys
import time

import pytest
import requests
from openai import OpenAI
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from control_plane.runtime import procs
from control_plane.runtime.certs import CertAuthority
from control_plane.runtime.nginx_conf import GatewayConfig
from gateway_readings import access_lines, scrape, value
from waiting import eventually

PLAN_KEY = "sk-test-realtime-plan-0123456789"
AUDIO = bytes(range(256)) * 40     # 10,240 bytes of "speech"


def start_realtime(name: str, log_dir) -> tuple[int, object]:
    port = procs.free_port()
    proc = procs.spawn([sys.executable, "-m", "control_plane.demo.realtime", "--port",
                        str(port), "--name", name], log=log_dir / f"{name}.log")
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
    except Exception:
        procs.stop(proc)
        raise
    return port, proc


def entry(id_: int, name: str, port: int, weight: int = 100) -> dict:
    return {"id": id_, "name": name, "protocol": "openai_realtime", "scheme": "http",
            "host": "127.0.0.1", "port": port, "host_header": f"localhost:{port}",
            "base_path": "", "weight": weight}


@pytest.fixture(scope="module")
def realtime_backends(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("realtime")
    started = []
    try:
        for name in ("rt-a", "rt-b"):
            started.append((name, *start_realtime(name, log_dir)))
        yield {name: port for name, port, _ in started}
    finally:
        for _, _, proc in started:
            procs.stop(proc)


def snapshot(helpers, backends, ports: dict, plan: dict | None = None,
             timeout_ms: int = 5000, version: int = 1, first_id: int = 10, **extra) -> dict:
    rt = [entry(first_id + i, name, port) for i, (name, port) in enumerate(sorted(ports.items()))]
    snap = helpers.make_snapshot(version, {
        "rt-demo": (timeout_ms, rt),
        "chat-demo": (5000, [backends["openai-a"].entry(1)])})
    if plan is not None:
        helpers.add_planned(snap, PLAN_KEY, plan, name="caller", plan_name="rt-plan")
    snap.update(extra)
    return snap


@pytest.fixture
def served(gateway, helpers, backends, realtime_backends):
    r = gateway.push(snapshot(helpers, backends, realtime_backends,
                              plan={"rate_per_second": 100, "realtime_sessions": 1,
                                    "realtime_session_s": 2}))
    assert r.status_code == 200, r.text
    return gateway


def ws_url(gw, model: str = "rt-demo") -> str:
    return gw.url.replace("http://", "ws://") + f"/v1/realtime?model={model}"


def line_of(gw, request_id: str) -> dict:
    """The access-log line of request `request_id` (lines of a test before may still be
    on their way: the log is buffered)."""
    def found():
        return [line for line in access_lines(gw, 1, timeout=1)
                if line["request_id"] == request_id]
    [line] = eventually(found, timeout=10)
    return line


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


def upgrade_headers(**more) -> dict:
    return {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": base64.b64encode(b"0123456789abcdef").decode(), **more}


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


def test_usage_counts_the_session_its_tokens_and_its_seconds(served):
    key = f"{time.strftime('%Y%m%d', time.gmtime())}|3|rt-demo"   # consumer 3: PLAN_KEY's
    before = served.usage()["counters"].get(key, [0] * 5)
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
        now = served.usage()["counters"].get(key, [0] * 5)
        return [a - b for a, b in zip(now, before)] if now[0] > before[0] else None
    delta = eventually(grown, timeout=5)
    # one session; "hello there" in, "echo: hello there" out; 2 seconds
    assert delta == [1, 2, 3, 5, 2]


def test_a_plain_get_is_not_an_upgrade(served, helpers):
    r = requests.get(ws_url(served).replace("ws://", "http://"), timeout=5,
                     headers={"Authorization": f"Bearer {helpers.KEY}"})
    err = helpers.assert_error(r, 400, "invalid_request")
    assert "Upgrade: websocket" in err["message"]


def test_no_backend_accepting_is_502_and_gives_the_session_slot_back(gateway, helpers, backends,
                                                                     dead_port):
    r = gateway.push(snapshot(helpers, backends, {"rt-dead": dead_port}, first_id=120,
                              plan={"rate_per_second": 100, "realtime_sessions": 1}))
    assert r.status_code == 200, r.text
    for _ in range(2):   # the plan allows one session: a slot kept would make this a 429
        r = requests.get(ws_url(gateway).replace("ws://", "http://"), timeout=10,
                         headers=upgrade_headers(Authorization=f"Bearer {PLAN_KEY}"))
        err = helpers.assert_error(r, 502, "backend_error")
        assert "accepted the session" in err["message"]


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
