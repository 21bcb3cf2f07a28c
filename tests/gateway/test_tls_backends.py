"""Gateway -> backends over HTTPS and mTLS, against real TLS backends (Python's ssl in
front of demo backends) with a CA made by the test: verification on by default, a
backend's own CA, its server name, client certificates, verification off only when
asked, a vendor mapping over HTTPS, streaming; and a backend whose certificate does
not verify gets no request, while the caller gets a 502 naming the TLS failure."""
from __future__ import annotations

import itertools
import json

import pytest
import requests

from control_plane.clients.backend_tls import trust_id
from gateway_readings import scrape, value
from tlsutil import CA, self_signed, tls_backend


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return CA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    return CA(tmp_path_factory.mktemp("other-ca"), name="Someone Else's CA")


_BASES = itertools.count(0, 10)


@pytest.fixture
def bid() -> int:
    """The test's backend ids are bid + 1, bid + 2, …, never another test's: the
    module's gateway keeps stats, circuits and TLS failure counts per backend id."""
    return next(_BASES)


@pytest.fixture
def start():
    """Start TLS demo backends; all stopped at teardown."""
    started = []

    def make(pair, **kw):
        srv = tls_backend(pair, **kw)
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.shutdown()


def entry(id: int, srv, *, name="localhost", verify=True, ca=None, client=None,
          weight=100, **over) -> dict:
    """An https backend of the snapshot, as services/snapshot.py writes it."""
    tls = {"verify": verify, "server_name": name, "trust": trust_id(verify, ca)}
    if verify and ca:
        tls["ca"] = ca
    if client is not None:
        tls["client_cert"], tls["client_key"] = client.cert_pem, client.key_pem
    b = {"id": id, "name": f"tls-{id}", "protocol": "openai", "scheme": "https",
         "host": "127.0.0.1", "port": srv.port, "host_header": f"localhost:{srv.port}",
         "base_path": "", "weight": weight, "tls": tls}
    b.update(over)
    return b


def serve(gw, helpers, *backends, version=1, mappings=None, model="chat-tls"):
    r = gw.push(helpers.make_snapshot(version, {model: (5000, list(backends))},
                                      mappings=mappings))
    assert r.status_code == 200, r.text


def refused_for_tls(r, helpers, gw=None) -> dict:
    assert r.json()["error"]["type"] == "backend_tls_error", (r.text, gw and gw.tail_error_log())
    err = helpers.assert_error(r, 502, "backend_tls_error")
    assert err["message"].startswith("backend TLS handshake failed")
    assert "BEGIN" not in err["message"]
    return err


def test_backend_with_its_own_ca_serves_chat_and_streams(gateway, helpers, ca, start, bid):
    srv = start(ca.issue("chat", ["localhost", "127.0.0.1"]))
    serve(gateway, helpers, entry(bid + 1, srv, ca=ca.pem))

    r = helpers.chat(gateway, "chat-tls")
    assert r.status_code == 200, r.text + gateway.tail_error_log()
    assert r.json()["choices"][0]["message"]["content"] == "echo: hello there"

    with helpers.chat(gateway, "chat-tls", stream=True) as s:
        assert s.status_code == 200
        assert s.headers["Content-Type"].startswith("text/event-stream")
        events = [line for line in s.iter_lines() if line.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]"
    text = "".join(json.loads(e[6:])["choices"][0]["delta"].get("content", "")
                   for e in events[:-1])
    assert text == "echo: hello there"
    assert srv.requests_seen == 2


def test_verification_is_on_by_default_against_the_system_store(gateway, helpers, ca, start, bid):
    # no tls_ca: the system store, which has never heard of the test's CA
    srv = start(ca.issue("unknown", ["localhost"]))
    serve(gateway, helpers, entry(bid + 1, srv))
    refused_for_tls(helpers.chat(gateway, "chat-tls"), helpers)
    assert srv.requests_seen == 0


def test_wrong_name_gets_nothing_and_the_caller_a_502(gateway, helpers, ca, start, bid):
    srv = start(ca.issue("elsewhere", ["other.example"]))
    serve(gateway, helpers, entry(bid + 1, srv, ca=ca.pem))
    refused_for_tls(helpers.chat(gateway, "chat-tls"), helpers)
    assert srv.requests_seen == 0
    samples = scrape(gateway)
    assert value(samples, "sluice_backend_tls_failures_total",
                 model="chat-tls", backend=f"tls-{bid + 1}") == 1


def test_server_name_is_what_is_verified_and_sent(gateway, helpers, ca, start, bid):
    srv = start(ca.issue("named", ["api.internal.example"]))
    serve(gateway, helpers, entry(bid + 1, srv, ca=ca.pem, name="api.internal.example"))
    r = helpers.chat(gateway, "chat-tls")
    assert r.status_code == 200, r.text


def test_an_ip_san_does_not_verify_a_dns_san_beside_it_does(gateway, helpers, ca, start, bid):
    # stock nginx matches proxy_ssl_name against DNS names only (X509_check_host): a
    # backend addressed by IP is refused under its IP even with that IP in its SANs
    # (the admin API refuses that form at save); the same certificate with a DNS SAN
    # too verifies under that name (tls_server_name), still dialled by IP
    ip_only = start(ca.issue("ip-only", ["127.0.0.1"]))
    serve(gateway, helpers, entry(bid + 1, ip_only, ca=ca.pem, name="127.0.0.1"))
    err = refused_for_tls(helpers.chat(gateway, "chat-tls"), helpers)
    assert "name mismatch" in err["message"], err
    assert ip_only.requests_seen == 0

    both = start(ca.issue("ip-and-dns", ["127.0.0.1", "llm.internal"]))
    serve(gateway, helpers, entry(bid + 2, both, ca=ca.pem, name="llm.internal"), version=2)
    r = helpers.chat(gateway, "chat-tls")
    assert r.status_code == 200, r.text + gateway.tail_error_log()
    assert both.requests_seen == 1


def test_expired_certificate_gets_nothing(gateway, helpers, ca, start, bid):
    srv = start(ca.issue("old", ["localhost"], expired=True))
    serve(gateway, helpers, entry(bid + 1, srv, ca=ca.pem))
    refused_for_tls(helpers.chat(gateway, "chat-tls"), helpers)
    assert srv.requests_seen == 0


def test_certificate_of_another_ca_gets_nothing(gateway, helpers, ca, other_ca, start, bid):
    # each backend trusts its own CA only, even with two CAs loaded side by side
    mine = start(ca.issue("mine", ["localhost"]))
    theirs = start(other_ca.issue("theirs", ["localhost"]))
    r = gateway.push(helpers.make_snapshot(1, {
        "good": (5000, [entry(bid + 1, mine, ca=ca.pem)]),
        "bad": (5000, [entry(bid + 2, theirs, ca=ca.pem)]),
        "also-good": (5000, [entry(bid + 3, theirs, ca=other_ca.pem)]),
    }))
    assert r.status_code == 200, r.text
    assert helpers.chat(gateway, "good").status_code == 200
    refused_for_tls(helpers.chat(gateway, "bad"), helpers)
    assert helpers.chat(gateway, "also-good").status_code == 200
    assert theirs.requests_seen == 1


def test_mtls_fails_without_a_client_certificate_and_works_with_one(gateway, helpers, ca,
                                                                    start, bid):
    srv = start(ca.issue("strict", ["localhost"]), client_ca=ca)
    serve(gateway, helpers, entry(bid + 1, srv, ca=ca.pem))
    refused_for_tls(helpers.chat(gateway, "chat-tls"), helpers, gateway)
    assert srv.requests_seen == 0

    serve(gateway, helpers, entry(bid + 1, srv, ca=ca.pem, client=ca.issue("gw", client=True)),
          version=2)
    r = helpers.chat(gateway, "chat-tls")
    assert r.status_code == 200, r.text
    assert srv.requests_seen == 1


def test_self_signed_works_only_with_verification_off(gateway, helpers, tmp_path, start, bid):
    srv = start(self_signed(tmp_path / "ss", "lab-box", ["localhost"]))
    serve(gateway, helpers, entry(bid + 1, srv))
    refused_for_tls(helpers.chat(gateway, "chat-tls"), helpers)
    assert srv.requests_seen == 0

    serve(gateway, helpers, entry(bid + 1, srv, verify=False), version=2)
    r = helpers.chat(gateway, "chat-tls")
    assert r.status_code == 200, r.text
    assert srv.requests_seen == 1


def test_vendor_mapping_over_https(gateway, helpers, ca, start, bid):
    srv = start(ca.issue("vendor", ["localhost"]), protocol="vendor-a", name="vendor-a")
    mappings = {"vendor-a": {"path": "/generate", "request": {"text": "{{input}}"},
                             "response": {"output": "/result/text", "error": "/err/msg"}}}
    serve(gateway, helpers, entry(bid + 1, srv, ca=ca.pem, protocol="vendor", mapping="vendor-a"),
          mappings=mappings, model="va")
    r = helpers.chat(gateway, "va")
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "A: hello there"


def test_tls_failures_open_the_circuit(gateway, helpers, ca, start, bid):
    good = start(ca.issue("good", ["localhost"]))
    bad = start(ca.issue("bad", ["wrong.example"]))
    # the bad backend alone first: its failures are what the breaker sees
    serve(gateway, helpers, entry(bid + 1, bad, ca=ca.pem))
    for _ in range(30):   # the breaker's default: 20 requests, 30 % failed
        r = helpers.chat(gateway, "chat-tls")
        if r.status_code == 503:
            break
        refused_for_tls(r, helpers)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["type"] == "backend_unavailable"
    assert bad.requests_seen == 0
    assert value(scrape(gateway), "sluice_backend_circuit_state",
                 model="chat-tls", backend=f"tls-{bid + 1}") == 1

    # beside a good one, traffic goes to the good one
    serve(gateway, helpers, entry(bid + 1, bad, ca=ca.pem), entry(bid + 2, good, ca=ca.pem),
          version=2)
    assert all(helpers.chat(gateway, "chat-tls").status_code == 200 for _ in range(5))
    assert bad.requests_seen == 0


def test_keepalive_connections_are_reused_per_tls_backend(gateway, helpers, ca, start, bid):
    a = start(ca.issue("ka-a", ["localhost"]), name="ka-a")
    b = start(ca.issue("ka-b", ["localhost"]), name="ka-b")
    r = gateway.push(helpers.make_snapshot(1, {
        "a": (5000, [entry(bid + 1, a, ca=ca.pem)]),
        "b": (5000, [entry(bid + 2, b, ca=ca.pem)]),
    }))
    assert r.status_code == 200, r.text
    for _ in range(10):
        ra, rb = helpers.chat(gateway, "a"), helpers.chat(gateway, "b")
        assert ra.status_code == rb.status_code == 200
        assert ra.headers.get("X-Demo-Backend", "ka-a") == "ka-a"
        assert rb.headers.get("X-Demo-Backend", "ka-b") == "ka-b"
    # each backend answered its own requests only, over few connections
    assert a.requests_seen == b.requests_seen == 10
    assert a.connections <= 2 * gateway.cfg.workers
    assert b.connections <= 2 * gateway.cfg.workers


def test_a_new_ca_is_served_after_the_reload_it_causes(own_gateway, helpers, ca, start):
    srv = start(ca.issue("reload", ["localhost"]))
    # pushed as the controller pushes (not through Gateway.push, which syncs itself)
    snap = helpers.make_snapshot(1, {"chat-tls": (5000, [entry(1, srv, ca=ca.pem)])})
    r = requests.post(own_gateway.internal_url + "/internal/snapshot", json=snap, timeout=10,
                      headers={"Authorization": f"Bearer {own_gateway.cfg.token}"})
    assert r.status_code == 200, r.text
    # until the reload, the backend is left out of its pool: a clear 503, not a 502
    helpers.assert_error(helpers.chat(own_gateway, "chat-tls"), 503, "backend_unavailable")
    assert own_gateway.sync_trust() is True      # what `sluice gateway` does twice a second
    assert trust_id(True, ca.pem) in \
        (own_gateway.prefix / "conf" / "backend_tls.trust").read_text().split()
    assert helpers.chat(own_gateway, "chat-tls").status_code == 200

    # the same CA set again: no reload
    serve(own_gateway, helpers, entry(1, srv, ca=ca.pem, weight=50), version=2)
    assert own_gateway.sync_trust() is False
    assert helpers.chat(own_gateway, "chat-tls").status_code == 200
    assert srv.requests_seen == 2


def test_timeout_falls_back_from_one_tls_backend_to_another(gateway, helpers, ca, other_ca,
                                                            start, bid):
    # location / -> the slow backend's CA location -> 504 -> @sluice_fallback -> the
    # fallback's own CA location with a client certificate
    slow = start(ca.issue("slow", ["localhost"]), name="slow", latency_ms=3000)
    fast = start(other_ca.issue("fast", ["localhost"]), name="fast", client_ca=other_ca)
    snap = helpers.make_snapshot(1, {
        "precise": (300, [entry(bid + 1, slow, ca=ca.pem)]),
        "quick": (5000, [entry(bid + 2, fast, ca=other_ca.pem,
                               client=other_ca.issue("gw-fb", client=True))]),
    })
    snap["models"]["precise"]["fallback_model"] = "quick"
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    r = helpers.chat(gateway, "precise")
    assert r.status_code == 200, r.text
    assert r.headers["X-Sluice-Fallback"] == "quick"
    assert r.json()["choices"][0]["message"]["content"] == "echo: hello there"
    assert fast.requests_seen == 1


def test_a_backends_own_502_is_not_taken_for_a_tls_failure(gateway, helpers, ca, start, bid):
    bad = start(ca.issue("bad-name", ["wrong.example"]))
    good = start(ca.issue("answers", ["localhost"]))
    r = gateway.push(helpers.make_snapshot(1, {
        "bad": (5000, [entry(bid + 1, bad, ca=ca.pem)]),
        "good": (5000, [entry(bid + 2, good, ca=ca.pem)]),
    }))
    assert r.status_code == 200, r.text
    # one client connection: first a refused handshake, then a backend that says 502
    with requests.Session() as s:
        h = {"Authorization": f"Bearer {helpers.KEY}"}
        body = {"messages": [{"role": "user", "content": "hi"}]}
        r = s.post(gateway.url + "/v1/chat/completions", json={**body, "model": "bad"},
                   headers=h, timeout=10)
        refused_for_tls(r, helpers)
        r = s.post(gateway.url + "/v1/chat/completions", json={**body, "model": "good"},
                   headers={**h, "X-Demo-Status": "502"}, timeout=10)
    # the backend's own error, its OpenAI type kept for an OpenAI caller
    err = helpers.assert_error(r, 502, "server_error")
    assert "injected status 502" in err["message"]
    assert good.requests_seen == 1


def test_a_client_pair_that_would_not_load_is_refused_at_the_push(gateway, helpers, ca,
                                                                  start, bid):
    # nginx would write such a key into its error log: the gateway refuses it first
    srv = start(ca.issue("pair", ["localhost"]), client_ca=ca)
    mine, other = ca.issue("mine", client=True), ca.issue("other", client=True)
    b = entry(bid + 1, srv, ca=ca.pem, client=mine)
    b["tls"]["client_key"] = other.key_pem
    r = gateway.push(helpers.make_snapshot(1, {"chat-tls": (5000, [b])}))
    assert r.status_code == 400
    assert "client_key: is not the key of client_cert" in r.text
    assert "PRIVATE" not in r.text
    helpers.chat(gateway, "chat-tls")
    assert "PRIVATE KEY" not in gateway.error_log.read_text()


@pytest.mark.parametrize("mtls", [False, True])
def test_unconvertible_200_from_a_backend_with_its_own_ca_is_a_502(gateway, helpers, ca,
                                                                    start, mtls, bid):
    # a converted answer is fetched by a subrequest, which reaches the backend's trust
    # set through its internal twin location: the status goes out after conversion
    srv = start(ca.issue("vendor-junk", ["localhost"]), protocol="vendor-a", name="vendor-a",
                client_ca=ca if mtls else None)
    client = ca.issue("gw-junk", client=True) if mtls else None
    mappings = {"good": {"path": "/generate", "request": {"text": "{{input}}"},
                         "response": {"output": "/result/text"}},
                "junk": {"path": "/generate", "request": {"text": "{{input}}"},
                         "response": {"output": "/nowhere"}}}
    r = gateway.push(helpers.make_snapshot(1, {
        "good": (5000, [entry(bid + 1, srv, ca=ca.pem, client=client, protocol="vendor",
                              mapping="good")]),
        "junk": (5000, [entry(bid + 2, srv, ca=ca.pem, client=client, protocol="vendor",
                              mapping="junk")]),
    }, mappings=mappings))
    assert r.status_code == 200, r.text
    r = helpers.chat(gateway, "good")
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "A: hello there"
    r = helpers.chat(gateway, "junk")
    err = helpers.assert_error(r, 502, "backend_error")
    assert err["message"] == "cannot convert the backend answer: answer has nothing at /nowhere"
    assert srv.requests_seen == 2
