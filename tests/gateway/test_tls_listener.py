"""The public HTTPS listener, as callers meet it: real nginx with a certificate from a
CA the test makes (Debian's openssl), real clients (the `openai` package, curl, Python's
ssl), the demo backends behind it."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai
import pytest
import requests

from control_plane.runtime import procs
from control_plane.runtime.certs import CertAuthority
from control_plane.runtime.gateway import GatewayProcess as Gateway
from control_plane.runtime.nginx_conf import GatewayConfig
from backend_http import Backend, entry, served
from gateway_readings import access_lines
from waiting import eventually

REPO = Path(__file__).resolve().parents[2]
TEXT = "hello over TLS ✓"
CURL = shutil.which("curl")


@pytest.fixture(scope="module")
def pki():
    """A private CA and a server certificate for 127.0.0.1/localhost (chain file)."""
    folder = Path(tempfile.mkdtemp(prefix="sluice-tls-"))
    folder.chmod(0o755)
    ca = CertAuthority.create(folder)
    cert, key = ca.issue(folder, "server", ["127.0.0.1", "localhost"])
    yield ca, cert, key
    shutil.rmtree(folder, ignore_errors=True)


def tls_config(prefix: Path, pki, **over) -> GatewayConfig:
    _, cert, key = pki
    port, internal_port, tls_port = procs.free_ports(3)
    return GatewayConfig(prefix=prefix, port=port, internal_port=internal_port,
                         tls_port=tls_port, tls_cert=cert, tls_key=key,
                         token=secrets.token_urlsafe(24), **over)


@pytest.fixture(scope="module")
def shared_tls_gw(shared_gateways, pki):
    """The module's gateway with both listeners (SharedGateway), started once."""
    return shared_gateways(lambda prefix: tls_config(prefix, pki))


@pytest.fixture
def tls_gw(shared_tls_gw, take_turn, helpers, protocol_backends):
    """The test's turn on the TLS gateway, serving chat-demo (openai) and v2 (KServe
    v2, converted frame by frame)."""
    gw = take_turn(shared_tls_gw)
    b = protocol_backends
    r = gw.push(helpers.make_snapshot(1, {
        "chat-demo": (5000, [b["openai"].entry(1)]),
        "v2": (5000, [b["kserve_v2"].entry(2)])}))
    assert r.status_code == 200, r.text
    return gw


@pytest.fixture
def ca_file(pki) -> str:
    return str(pki[0].cert)


def client_context(ca_file: str, version: ssl.TLSVersion | None = None,
                   ciphers: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file)
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


def handshake(port: int, ctx: ssl.SSLContext,
              server_hostname: str = "127.0.0.1") -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        return ctx.wrap_socket(raw, server_hostname=server_hostname)
    except BaseException:
        raw.close()
        raise


def raw_exchange(tls: ssl.SSLSocket, request: bytes) -> tuple[str, dict, bytes]:
    """Send `request`, read until the server closes; status line, headers, body."""
    tls.sendall(request)
    data = b""
    while chunk := tls.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


def chat_request(key: str, version: str = "HTTP/1.1", model: str = "chat-demo") -> bytes:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": TEXT}]})
    return (f"POST /v1/chat/completions {version}\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body.encode())}\r\nConnection: close\r\n\r\n"
            ).encode() + body.encode()


def curl(*args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    assert CURL, "curl is not installed (scripts/setup.sh installs it)"
    return subprocess.run([CURL, "-sS", *args], capture_output=True, text=True,
                          timeout=timeout)


# ---- the official openai client ------------------------------------------------------

@pytest.fixture
def openai_client(tls_gw, helpers, ca_file):
    return openai.OpenAI(base_url=tls_gw.tls_url + "/v1", api_key=helpers.KEY,
                         max_retries=0, timeout=10,
                         http_client=openai.DefaultHttpxClient(
                             verify=client_context(ca_file)))


def test_openai_client_chat_over_https(openai_client):
    reply = openai_client.chat.completions.create(
        model="chat-demo", messages=[{"role": "user", "content": TEXT}])
    assert reply.choices[0].message.content == "echo: " + TEXT
    assert reply.usage.total_tokens > 0


@pytest.mark.parametrize("model, answer", [("chat-demo", "echo: "), ("v2", "v2: ")])
def test_openai_client_stream_over_https(openai_client, model, answer):
    chunks = list(openai_client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": TEXT}], stream=True,
        stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) \
        == answer + TEXT
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


def test_openai_client_errors_over_https(openai_client):
    with pytest.raises(openai.NotFoundError) as exc:
        openai_client.chat.completions.create(model="nope",
                                              messages=[{"role": "user", "content": "x"}])
    assert "nope" in exc.value.message


def test_a_client_without_the_ca_does_not_trust_the_demo_certificate(tls_gw, helpers):
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(tls_gw.tls_url + "/v1/models", timeout=5,
                     headers={"Authorization": f"Bearer {helpers.KEY}"})


# ---- HTTP/2 ----------------------------------------------------------------------------

def test_curl_negotiates_http2_and_gets_the_answer(tls_gw, helpers, ca_file):
    body = json.dumps({"model": "chat-demo", "messages": [{"role": "user", "content": TEXT}]})
    res = curl("--http2", "--cacert", ca_file, "-D", "-", "-o", "/dev/null",
               "-w", "%{http_version} %{http_code}",
               "-H", f"Authorization: Bearer {helpers.KEY}",
               "-H", "Content-Type: application/json", "-d", body,
               tls_gw.tls_url + "/v1/chat/completions")
    assert res.returncode == 0, res.stderr
    assert res.stdout.rstrip().endswith("2 200"), res.stdout
    assert "\nx-request-id: " in res.stdout.lower()
    res = curl("--http2", "--cacert", ca_file, "-H", f"Authorization: Bearer {helpers.KEY}",
               "-H", "Content-Type: application/json", "-d", body,
               tls_gw.tls_url + "/v1/chat/completions")
    assert json.loads(res.stdout)["choices"][0]["message"]["content"] == "echo: " + TEXT


def test_converted_answer_over_http2(tls_gw, helpers, ca_file):
    # ngx.location.capture refuses HTTP/2 requests: an answer converted whole is
    # served again as HTTP/1.1 on the gateway's unix socket (@sluice_h1_loop)
    body = json.dumps({"model": "v2", "messages": [{"role": "user", "content": TEXT}]})
    res = curl("--http2", "--cacert", ca_file, "-w", "\n%{http_version} %{http_code}",
               "-H", f"Authorization: Bearer {helpers.KEY}",
               "-H", "Content-Type: application/json", "-d", body,
               tls_gw.tls_url + "/v1/chat/completions")
    assert res.returncode == 0, res.stderr
    answer, status = res.stdout.rsplit("\n", 1)
    assert status == "2 200", res.stdout
    assert json.loads(answer)["choices"][0]["message"]["content"] == "v2: " + TEXT


def test_converted_answer_over_http2_carries_the_plans_rate_limit_headers_once(
        tls_gw, helpers, ca_file, protocol_backends):
    # the HTTP/1.1 pass of an HTTP/2 request counts the plan and sets X-RateLimit-*
    # (add_header); the HTTP/2 pass hides a backend's own but passes those through
    key = "sk-test-h2-plan-0123456789abcdef"
    b = protocol_backends
    snap = helpers.make_snapshot(2, {"chat-demo": (5000, [b["openai"].entry(1)]),
                                     "v2": (5000, [b["kserve_v2"].entry(2)])})
    helpers.add_planned(snap, key, {"rate_per_second": 0.01, "burst": 5})
    assert tls_gw.push(snap).status_code == 200
    body = json.dumps({"model": "v2", "messages": [{"role": "user", "content": TEXT}]})
    res = curl("--http2", "--cacert", ca_file, "-D", "-", "-o", "/dev/null",
               "-H", f"Authorization: Bearer {key}", "-H", "Content-Type: application/json",
               "-d", body, tls_gw.tls_url + "/v1/chat/completions")
    assert res.returncode == 0, res.stderr
    lines = [line.strip().lower() for line in res.stdout.splitlines()]
    assert lines[0].startswith("http/2 200"), res.stdout
    assert [ln for ln in lines if ln.startswith("x-ratelimit-")] == [
        "x-ratelimit-limit: 5", "x-ratelimit-remaining: 4",
        [ln for ln in lines if ln.startswith("x-ratelimit-reset")][0]], res.stdout


class _Odd(Backend):
    """A backend for the HTTP/2 relay tests: as KServe v1 (predict) a 200 whose body
    cannot be converted; as OpenAI its own 504."""

    def do_POST(self):
        self.read_body()
        if self.path.endswith(":predict") or "/predict" in self.path:
            self.answer(200, b'{"unexpected": true}')
        else:
            self.answer(504, b'{"error": {"message": "model timed out", "type": "timeout"}}')


@pytest.fixture
def odd_gw(shared_tls_gw, take_turn, helpers, protocol_backends):
    """The test's turn on the TLS gateway, with `junk` (predict backend answering an
    unconvertible 200) and `slow` (OpenAI backend answering its own 504, fallback
    chat-demo)."""
    with served(_Odd) as port:
        gw = take_turn(shared_tls_gw)
        snap = helpers.make_snapshot(1, {
            "chat-demo": (5000, [protocol_backends["openai"].entry(1)]),
            "junk": (5000, [entry(2, "odd-predict", "predict", port)]),
            "slow": (5000, [entry(3, "odd-openai", "openai", port)])})
        snap["models"]["slow"]["fallback_model"] = "chat-demo"
        assert gw.push(snap).status_code == 200
        yield gw


def h2_chat(gw, helpers, ca_file, model, rid):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": TEXT}]})
    res = curl("--http2", "--cacert", ca_file, "-D", "-", "-H", f"X-Request-Id: {rid}",
               "-H", f"Authorization: Bearer {helpers.KEY}",
               "-H", "Content-Type: application/json", "-d", body,
               gw.tls_url + "/v1/chat/completions")
    assert res.returncode == 0, res.stderr
    head, _, answer = res.stdout.replace("\r\n", "\n").partition("\n\n")
    assert answer, res.stdout
    return head, json.loads(answer)


def logged_once(gw, rid) -> dict:
    """The request's log line: exactly one, though it was served twice (HTTP/2, then
    HTTP/1.1 on the unix socket)."""
    lines = eventually(lambda: [line for line in access_lines(gw, 1, timeout=0.5)
                                if line["request_id"] == rid], 10)
    time.sleep(1.5)   # the log's flush interval: a second line would be there by now
    lines = [line for line in access_lines(gw, 1) if line["request_id"] == rid]
    assert len(lines) == 1, lines
    return lines[0]


def test_unconvertible_200_over_http2_is_a_502(odd_gw, helpers, ca_file):
    head, answer = h2_chat(odd_gw, helpers, ca_file, "junk", "h2-junk")
    assert head.startswith("HTTP/2 502"), head
    err = answer["error"]
    assert err["code"] == 502 and err["request_id"] == "h2-junk"
    assert "cannot convert the backend answer" in err["message"]
    line = logged_once(odd_gw, "h2-junk")
    assert line["status"] == "502" and line["model"] == "junk"


def test_backend_504_over_http2_falls_back(odd_gw, helpers, ca_file):
    head, answer = h2_chat(odd_gw, helpers, ca_file, "slow", "h2-slow")
    assert head.startswith("HTTP/2 200"), head
    assert "x-sluice-fallback: chat-demo" in head.lower()
    assert answer["choices"][0]["message"]["content"] == "echo: " + TEXT
    line = logged_once(odd_gw, "h2-slow")
    assert line["status"] == "200" and line["fallback"] == "chat-demo"


def test_http2_bodies_without_a_length_and_too_large_bodies(tls_gw, helpers, ca_file):
    # curl uploading from stdin over HTTP/2 sends no content-length: the body is read
    body = json.dumps({"model": "chat-demo", "messages": [{"role": "user", "content": TEXT}]})
    res = subprocess.run([CURL, "-sS", "--http2", "--cacert", ca_file, "-T", "-", "-X", "POST",
                          "-H", f"Authorization: Bearer {helpers.KEY}",
                          "-H", "Content-Type: application/json", "-w", "\n%{http_version}",
                          tls_gw.tls_url + "/v1/chat/completions"],
                         input=body, capture_output=True, text=True, timeout=20)
    answer, version = res.stdout.rsplit("\n", 1)
    assert version == "2", res.stderr
    assert json.loads(answer)["choices"][0]["message"]["content"] == "echo: " + TEXT
    # nginx's own 413 (over the 1m limit) in the error template, over HTTP/2
    res = subprocess.run([CURL, "-sS", "--http2", "--cacert", ca_file, "--data-binary", "@-",
                          "-H", f"Authorization: Bearer {helpers.KEY}", "-w", "\n%{http_code}",
                          tls_gw.tls_url + "/v1/chat/completions"],
                         input="a" * 2_000_000, capture_output=True, text=True, timeout=20)
    answer, status = res.stdout.rstrip().rsplit("\n", 1)
    assert status == "413", res.stdout[-300:]
    err = json.loads(answer)["error"]
    assert (err["code"], err["type"]) == (413, "payload_too_large") and err["request_id"]


def test_plain_listener_stays_http1_only(tls_gw, helpers):
    """HTTP/2 is offered by ALPN on the TLS listener only; the plain one answers 1.1."""
    res = curl("--http2", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
               "-H", f"Authorization: Bearer {helpers.KEY}", tls_gw.url + "/v1/models")
    assert res.stdout == "1.1 200", (res.stdout, res.stderr)


@pytest.mark.parametrize("model", ["chat-demo", "v2"])
def test_sse_is_unbuffered_over_http2(tls_gw, helpers, ca_file, model):
    # 8 words, 250 ms between backend frames: the backend needs >= 1.75 s in all. The
    # first chunk must reach us while it is still writing (a buffering gateway would
    # give ~0 s between our first chunk and the end).
    body = json.dumps({"model": model, "stream": True,
                       "messages": [{"role": "user", "content": "a b c d e f g h"}]})
    proc = subprocess.Popen(
        [CURL, "-sS", "-N", "--http2", "--cacert", ca_file,
         "-w", "\nHTTP_VERSION=%{http_version}\n",
         "-H", f"Authorization: Bearer {helpers.KEY}", "-H", "X-Demo-Chunk-Delay-Ms: 250",
         "-H", "Content-Type: application/json", "-d", body,
         tls_gw.tls_url + "/v1/chat/completions"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = next(line for line in proc.stdout if line.startswith("data: "))
        t_first = time.monotonic()
        assert json.loads(first[6:])["object"] == "chat.completion.chunk"
        rest = proc.stdout.read().splitlines()
        t_end = time.monotonic()
    finally:
        proc.wait(20)
    assert proc.returncode == 0, proc.stderr.read()
    assert "HTTP_VERSION=2" in rest
    data = [line for line in rest if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]"
    assert t_end - t_first >= 1.0, f"first chunk only {t_end - t_first:.2f}s before the end"


def test_errors_request_ids_and_log_lines_are_the_same_over_https(tls_gw, helpers, ca_file):
    # no key, over HTTP/1.1 and HTTP/2: the error template with the request id
    r = requests.post(tls_gw.tls_url + "/v1/chat/completions", json={"model": "chat-demo"},
                      verify=ca_file, timeout=5)
    helpers.assert_error(r, 401, "unauthorized")
    res = curl("--http2", "--cacert", ca_file, "-D", "-", "-d", "{}",
               "-H", f"Authorization: Bearer {helpers.KEY}",
               "-H", "Content-Type: application/json",
               tls_gw.tls_url + "/v1/chat/completions")
    head, _, body = res.stdout.partition("\n\n")   # text mode: \r\n reads as \n
    assert head.startswith("HTTP/2 400"), head
    err = json.loads(body)["error"]
    assert err["type"] == "invalid_request" and err["code"] == 400
    assert f"x-request-id: {err['request_id']}" in head.lower()
    # a caller's own valid X-Request-Id is kept, and the log line says what happened
    rid = "tls-" + secrets.token_hex(8)
    r = requests.post(tls_gw.tls_url + "/v1/chat/completions", verify=ca_file, timeout=5,
                      headers={"Authorization": f"Bearer {helpers.KEY}", "X-Request-Id": rid},
                      json={"model": "chat-demo",
                            "messages": [{"role": "user", "content": TEXT}]})
    assert r.status_code == 200 and r.headers["X-Request-Id"] == rid
    lines = eventually(lambda: [line for line in access_lines(tls_gw, 3, timeout=0.5)
                                if line["request_id"] == rid], timeout=10)
    assert [(line["model"], line["status"], line["consumer"]) for line in lines] == [
        ("chat-demo", "200", "alice")]


# ---- protocol versions and ciphers -------------------------------------------------------

@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3],
                         ids=["TLSv1.2", "TLSv1.3"])
def test_tls12_and_tls13_clients_are_served(tls_gw, helpers, ca_file, version):
    with handshake(tls_gw.cfg.tls_port, client_context(ca_file, version)) as tls:
        assert tls.version() == version.name.replace("v1_", "v1.")
        name, _, bits = tls.cipher()
        assert bits >= 128 and ("GCM" in name or "CHACHA20" in name), name
        status, headers, body = raw_exchange(tls, chat_request(helpers.KEY))
    assert status == "HTTP/1.1 200 OK"
    assert json.loads(body)["choices"][0]["message"]["content"] == "echo: " + TEXT
    assert headers["x-request-id"]


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1],
                         ids=["TLSv1.0", "TLSv1.1"])
def test_old_protocols_are_refused_at_the_handshake(tls_gw, ca_file, version):
    # The client must really offer the old protocol: OpenSSL's default security level
    # would stop it before it sends a ClientHello, so it drops to level 0. The error
    # must then be the server's alert, not the client's own refusal.
    ctx = client_context(ca_file, version, ciphers="DEFAULT:@SECLEVEL=0")
    with pytest.raises(ssl.SSLError) as exc:
        handshake(tls_gw.cfg.tls_port, ctx).close()
    assert "ALERT_PROTOCOL_VERSION" in str(exc.value), exc.value


def test_weak_ciphers_are_refused(tls_gw, ca_file):
    # TLS 1.2 with CBC (no AEAD) only: the server has no cipher in common with it
    ctx = client_context(ca_file, ssl.TLSVersion.TLSv1_2,
                         ciphers="ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA")
    with pytest.raises(ssl.SSLError) as exc:
        handshake(tls_gw.cfg.tls_port, ctx).close()
    assert "HANDSHAKE_FAILURE" in str(exc.value), exc.value


def test_no_session_tickets(tls_gw, ca_file):
    ctx = client_context(ca_file, ssl.TLSVersion.TLSv1_2)
    with handshake(tls_gw.cfg.tls_port, ctx) as tls:
        assert tls.session is not None and not tls.session.has_ticket


def test_http10_client_is_served(tls_gw, helpers, ca_file):
    with handshake(tls_gw.cfg.tls_port, client_context(ca_file)) as tls:
        status, headers, body = raw_exchange(tls, chat_request(helpers.KEY, "HTTP/1.0"))
    assert status.endswith(" 200 OK"), status
    assert json.loads(body)["choices"][0]["message"]["content"] == "echo: " + TEXT
    assert headers["x-request-id"]


def test_the_plain_listener_can_be_turned_off(gateway_factory, prefix, pki, helpers,
                                              ca_file, default_snapshot):
    gw = gateway_factory(tls_config(prefix, pki, plain=False))
    assert gw.push(default_snapshot).status_code == 200
    assert gw.url == gw.tls_url
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{gw.cfg.port}/v1/models", timeout=2)
    r = requests.get(gw.url + "/v1/models", verify=ca_file, timeout=5,
                     headers={"Authorization": f"Bearer {helpers.KEY}"})
    assert r.status_code == 200
    assert "chat-demo" in [m["id"] for m in r.json()["data"]]


def test_a_key_that_does_not_match_the_certificate_stops_the_start_clearly(
        prefix, pki, tmp_path):
    ca, cert, _ = pki
    _, wrong_key = ca.issue(tmp_path, "other", ["127.0.0.1"])
    cfg = tls_config(prefix, pki)
    cfg.tls_key = wrong_key
    gw = Gateway(cfg)
    with pytest.raises(RuntimeError, match="key values mismatch") as exc:
        gw.start(log_to=tmp_path / "nginx.out")
    assert "PRIVATE KEY" not in str(exc.value)
    assert gw.proc is None


# ---- a renewed certificate, under load ---------------------------------------------------

def served_certificate(port: int) -> bytes:
    """The DER of the leaf certificate a new connection to `port` is shown."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with handshake(port, ctx) as tls:
        return tls.getpeercert(binary_form=True)


def der(pem_file: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem_file.read_text().split("-----END CERTIFICATE-----")[0]
                                    + "-----END CERTIFICATE-----\n")


def test_renewed_certificate_is_served_after_reload_with_no_failed_request(
        tls_gw, helpers, pki, ca_file):
    ca, cert, _ = pki
    assert served_certificate(tls_gw.cfg.tls_port) == der(cert)
    body = {"model": "chat-demo", "messages": [{"role": "user", "content": TEXT}]}
    headers = {"Authorization": f"Bearer {helpers.KEY}"}
    stop = threading.Event()
    done: list[int] = []
    failures: list[str] = []

    def keep_alive_caller():
        # the openai client: keep-alive connections, its default retries (an idle
        # keep-alive connection that nginx closes at a reload is retried, as HTTP
        # lets a client do with a request that never got an answer)
        client = openai.OpenAI(base_url=tls_gw.tls_url + "/v1", api_key=helpers.KEY,
                               timeout=10, http_client=openai.DefaultHttpxClient(
                                   verify=client_context(ca_file)))
        while not stop.is_set():
            try:
                reply = client.chat.completions.create(**body)
                assert reply.choices[0].message.content == "echo: " + TEXT
                done.append(1)
            except Exception as exc:  # noqa: BLE001 - every failure is reported
                failures.append(f"keep-alive: {exc!r}")

    def new_connection_caller():
        # a new TCP connection and full TLS handshake per request, no retries
        while not stop.is_set():
            try:
                r = requests.post(tls_gw.tls_url + "/v1/chat/completions", json=body,
                                  headers={**headers, "Connection": "close"},
                                  verify=ca_file, timeout=10)
                assert r.status_code == 200, r.text
                done.append(1)
            except Exception as exc:  # noqa: BLE001
                failures.append(f"new connection: {exc!r}")

    threads = [threading.Thread(target=f) for f in (keep_alive_caller,) * 3
               + (new_connection_caller,) * 3]
    for t in threads:
        t.start()
    try:
        eventually(lambda: len(done) >= 50, timeout=20, message="load is flowing")
        renewed_cert, _ = ca.issue(cert.parent, "server", ["127.0.0.1", "localhost"])
        assert renewed_cert == cert and der(cert) != served_certificate(tls_gw.cfg.tls_port)
        tls_gw.reload()
        before = len(done)
        eventually(lambda: served_certificate(tls_gw.cfg.tls_port) == der(cert), timeout=10,
                   message="the renewed certificate is served")
        eventually(lambda: len(done) >= before + 50, timeout=20,
                   message="load keeps flowing after the reload")
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    assert failures == [], failures[:5]


def test_sluice_gateway_serves_https_only_and_takes_a_renewed_certificate_on_sighup(
        prefix, pki, tmp_path):
    """`sluice gateway` as an operator runs it: settings from the environment, plain
    listener off, and the renewal path: replace the files, send SIGHUP."""
    ca, _, _ = pki
    cert, key = ca.issue(ca.cert.parent, "cli", ["127.0.0.1", "localhost"])
    port, internal_port, tls_port = procs.free_ports(3)
    env = dict(os.environ, SLUICE_GATEWAY_TOKEN=secrets.token_urlsafe(24),
               SLUICE_GATEWAY_HOST="127.0.0.1", SLUICE_GATEWAY_PORT=str(port),
               SLUICE_INTERNAL_PORT=str(internal_port), SLUICE_GATEWAY_TLS_PORT=str(tls_port),
               SLUICE_TLS_CERT=str(cert), SLUICE_TLS_KEY=str(key), SLUICE_GATEWAY_PLAIN="off")
    proc = procs.spawn([sys.executable, "-m", "control_plane.cli", "gateway", "--prefix",
                        str(prefix), "--workers", "1"], env=env, cwd=REPO,
                       log=tmp_path / "gateway.out")
    try:
        first = eventually(lambda: served_certificate(tls_port), timeout=20,
                           message="sluice gateway serves HTTPS")
        assert first == der(cert)
        r = requests.get(f"https://127.0.0.1:{tls_port}/v1/models", verify=str(ca.cert),
                         timeout=5)
        assert r.status_code == 503      # no snapshot yet: the error template, over TLS
        assert r.json()["error"]["request_id"] == r.headers["X-Request-Id"]
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
        # a botched renewal (a certificate without its key) is refused; the gateway
        # keeps serving the certificate it has
        other, _ = ca.issue(tmp_path, "other", ["127.0.0.1"])
        good = cert.read_bytes()
        cert.write_bytes(other.read_bytes())
        proc.send_signal(signal.SIGHUP)
        eventually(lambda: "reload refused" in (tmp_path / "gateway.out").read_text(),
                   timeout=20, message="sluice gateway reports the refused reload")
        assert proc.poll() is None
        assert served_certificate(tls_port) == first
        assert "PRIVATE KEY" not in (tmp_path / "gateway.out").read_text()
        cert.write_bytes(good)
        # the real renewal
        ca.issue(ca.cert.parent, "cli", ["127.0.0.1", "localhost"])
        renewed = der(cert)
        assert renewed != first
        proc.send_signal(signal.SIGHUP)
        eventually(lambda: served_certificate(tls_port) == renewed, timeout=20,
                   message="the renewed certificate is served after SIGHUP")
        assert proc.poll() is None, (tmp_path / "gateway.out").read_text()
    finally:
        procs.stop(proc)
