"""Backends over HTTPS in the admin API: the TLS fields, their checks, the client
certificate and key as write-only secrets (never returned, never in the audit trail
or the snapshot the API shows); and the controller's health probes and Prometheus
scrapes speaking TLS to real TLS backends with the backend's own settings."""
from __future__ import annotations

import json
import subprocess

import pytest

from control_plane.clients.gateway import GatewayClient
from control_plane.controller.health_loop import HealthLoop
from control_plane.controller.scraper import Scraper
from control_plane.db import make_engine, make_sessionmaker
from control_plane.demo.metrics import DemoMetrics
from control_plane.services import scrapes, snapshot
from control_plane.settings import Settings
from tlsutil import CA, tls_backend
from waiting import eventually


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return CA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def client_pair(ca):
    return ca.issue("gateway", client=True)


@pytest.fixture
def sessions(db_url):
    engine = make_engine(db_url)
    yield make_sessionmaker(engine)
    engine.dispose()


@pytest.fixture
def start():
    started = []

    def make(pair, **kw):
        srv = tls_backend(pair, **kw)
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.shutdown()


def _fields(resp):
    assert resp.status_code == 422, resp.get_json()
    return resp.get_json()["error"]["fields"]


def test_secrets_are_write_only_and_shown_as_set(api, make, ca, client_pair):
    b = make("backend", url="https://api.example.com/v1", tls_ca=ca.pem,
             tls_server_name="API.example.com", tls_client_cert=client_pair.cert_pem,
             tls_client_key=client_pair.key_pem)
    assert b["tls_verify"] is True
    assert b["tls_ca"] == ca.pem.strip() + "\n"
    assert b["tls_server_name"] == "api.example.com"
    assert b["tls_client_cert_set"] is True and b["tls_client_key_set"] is True
    assert "tls_client_key" not in b and "tls_client_cert" not in b
    for shown in (b, api("get", f"/backends/{b['id']}").get_json(),
                  api("get", "/backends").get_json()):
        text = json.dumps(shown)
        assert "PRIVATE KEY" not in text
        assert client_pair.cert_pem.split("\n")[1] not in text   # no line of the cert either

    # the audit trail and the snapshot the API shows say "set", nothing more
    trail = json.dumps(api("get", "/audit?resource=backend").get_json())
    assert "PRIVATE KEY" not in trail and client_pair.cert_pem.split("\n")[1] not in trail
    snap = json.dumps(api("get", "/snapshot").get_json())
    assert "PRIVATE KEY" not in snap and client_pair.cert_pem.split("\n")[1] not in snap

    # read-only flags cannot be written; null clears the pair
    assert _fields(api("patch", f"/backends/{b['id']}",
                       json={"tls_client_cert_set": False})) == {
        "tls_client_cert_set": "is read-only"}
    r = api("patch", f"/backends/{b['id']}", json={"tls_client_cert": None,
                                                   "tls_client_key": None})
    assert r.status_code == 200, r.get_json()
    assert r.get_json()["tls_client_cert_set"] is False


def test_defaults_for_an_https_backend(make):
    b = make("backend", url="https://llm.example.com")
    assert (b["tls_verify"], b["tls_ca"], b["tls_server_name"]) == (True, None, None)
    assert b["tls_client_cert_set"] is False and b["tls_client_key_set"] is False


def test_snapshot_carries_tls_to_the_gateway(make, sessions, ca, client_pair):
    make("backend", name="tls-b", url="https://127.0.0.1:8443", tls_ca=ca.pem,
         tls_server_name="llm.internal", tls_client_cert=client_pair.cert_pem,
         tls_client_key=client_pair.key_pem)
    make("backend", name="plain-b")
    with sessions() as s:
        snap = snapshot.build(s)
    entries = {b["name"]: b for m in snap["models"].values() for b in m["backends"]}
    tls = entries["tls-b"]["tls"]
    assert entries["tls-b"]["scheme"] == "https"
    assert tls["server_name"] == "llm.internal" and tls["verify"] is True
    assert tls["ca"] == ca.pem.strip() + "\n" and tls["trust"].startswith("ca-")
    assert tls["client_key"] == client_pair.key_pem.strip() + "\n"
    assert "tls" not in entries["plain-b"]


@pytest.mark.parametrize("fields, field, reason", [
    ({"tls_ca": "not a pem"}, "tls_ca", "is not PEM"),
    ({"tls_ca": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"},
     "tls_ca", "is not PEM"),
    ({"tls_server_name": "bad_name!"}, "tls_server_name", "must be a host name"),
    ({"tls_verify": "no"}, "tls_verify", "must be true or false"),
    ({"tls_client_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"},
     "tls_client_key", "is not a PEM private key"),
])
def test_bad_tls_fields(offline_api, fields, field, reason):
    fields_err = _fields(offline_api("post", "/backends", json={
        "name": "b", "model_id": 1, "url": "https://h:1", "protocol": "openai", **fields}))
    assert set(fields_err) == {field}
    assert fields_err[field].startswith(reason)


def test_tls_settings_only_on_https_backends(api, make, ca, client_pair):
    model = make("model")
    base = {"name": "x", "model_id": model["id"], "protocol": "openai"}
    r = api("post", "/backends", json={**base, "url": "http://h:1", "tls_ca": ca.pem})
    assert _fields(r) == {"tls_ca": "applies to https:// backends only"}
    r = api("post", "/backends", json={**base, "url": "http://h:1",
                                        "tls_server_name": "h.example"})
    assert _fields(r) == {"tls_server_name": "applies to https:// backends only"}

    b = make("backend", url="https://h:1", tls_ca=ca.pem)
    r = api("patch", f"/backends/{b['id']}", json={"url": "http://h:1"})
    assert set(_fields(r)) == {"url"}


def test_client_pair_comes_together_and_must_match(api, make, ca, client_pair):
    other = ca.issue("other", client=True)
    model = make("model")
    base = {"name": "x", "model_id": model["id"], "protocol": "openai", "url": "https://h:1"}
    r = api("post", "/backends", json={**base, "tls_client_cert": client_pair.cert_pem})
    assert _fields(r) == {"tls_client_key": "is required with tls_client_cert"}
    r = api("post", "/backends", json={**base, "tls_client_cert": client_pair.cert_pem,
                                        "tls_client_key": other.key_pem})
    assert _fields(r) == {"tls_client_key": "is not the key of tls_client_cert"}
    r = api("post", "/backends", json={**base, "tls_client_cert": client_pair.key_pem,
                                        "tls_client_key": client_pair.key_pem})
    assert "tls_client_cert" in _fields(r)
    # a key is never echoed in an error
    assert "PRIVATE" not in json.dumps(r.get_json())


def test_encrypted_key_is_refused(offline_api, client_pair, tmp_path):
    enc = tmp_path / "enc.key"
    subprocess.run(["openssl", "pkey", "-in", str(client_pair.key), "-aes256", "-passout",
                    "pass:secret", "-out", str(enc)], check=True, capture_output=True)
    r = offline_api("post", "/backends", json={
        "name": "b", "model_id": 1, "url": "https://h:1", "protocol": "openai",
        "tls_client_cert": client_pair.cert_pem, "tls_client_key": enc.read_text()})
    assert _fields(r)["tls_client_key"].startswith("is encrypted")


def test_verification_off_refuses_a_ca(api, make, ca):
    model = make("model")
    r = api("post", "/backends", json={"name": "x", "model_id": model["id"],
                                        "protocol": "openai", "url": "https://h:1",
                                        "tls_verify": False, "tls_ca": ca.pem})
    assert set(_fields(r)) == {"tls_ca"}


def test_health_probes_speak_tls_with_the_backends_settings(api, make, db_url, ca, client_pair,
                                                             start):
    strict = start(ca.issue("strict", ["localhost"]), client_ca=ca)
    named = start(ca.issue("named", ["llm.internal"]))
    good = make("backend", url=f"https://localhost:{strict.port}", tls_ca=ca.pem,
                tls_client_cert=client_pair.cert_pem, tls_client_key=client_pair.key_pem)
    no_cert = make("backend", url=f"https://localhost:{strict.port}", tls_ca=ca.pem)
    system = make("backend", url=f"https://localhost:{named.port}",
                  tls_server_name="llm.internal")          # the system store: no
    sni = make("backend", url=f"https://127.0.0.1:{named.port}", tls_ca=ca.pem,
               tls_server_name="llm.internal")

    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as session:
            snap = snapshot.build(session)
        loop = HealthLoop(GatewayClient(None))
        try:
            table = loop.run(Settings(health_timeout=3.0), make_sessionmaker(engine), [], snap)
        finally:
            loop.close()
    finally:
        engine.dispose()
    states = {bid: s["state"] for bid, s in table.items()}
    assert states[str(good["id"])] == "ready"
    assert states[str(sni["id"])] == "ready"
    assert states[str(no_cert["id"])] == "unreachable"
    assert states[str(system["id"])] == "unreachable"


def test_scraper_speaks_tls_with_the_backends_settings(make, sessions, ca, client_pair, start):
    srv = start(ca.issue("metrics", ["localhost"]), client_ca=ca)
    srv.metrics = DemoMetrics("vllm", srv.name, used=0.25)
    url = f"https://localhost:{srv.port}/metrics"
    ok = make("backend", url=f"https://localhost:{srv.port}", metrics_url=url,
              metrics_format="vllm", tls_ca=ca.pem, tls_client_cert=client_pair.cert_pem,
              tls_client_key=client_pair.key_pem)
    refused = make("backend", url=f"https://localhost:{srv.port}", metrics_url=url,
                   metrics_format="vllm", tls_ca=ca.pem)   # no client certificate
    scraper = Scraper()

    def stored():
        scraper.kick(sessions)
        with sessions() as s:
            latest = {e["backend_id"]: e for e in scrapes.latest(s, 60)
                      if e["error"] or e["scraped_at"]}
        return latest if {ok["id"], refused["id"]} <= set(latest) else None

    try:
        latest = eventually(stored, 10)
    finally:
        scraper.close()
    assert latest[ok["id"]]["error"] is None
    assert latest[ok["id"]]["free_fraction"] == pytest.approx(0.75)
    assert "SSL" in latest[refused["id"]]["error"]


@pytest.mark.parametrize("url", ["https://127.0.0.1:8443", "https://10.1.2.3:8443/v1"])
def test_an_ip_backend_that_verifies_needs_a_dns_server_name(api, make, ca, url):
    # the gateway never matches an IP SAN: an https backend addressed by IP with
    # verification on is refused unless tls_server_name names a DNS name to verify
    model = make("model")
    base = {"name": "ip", "model_id": model["id"], "protocol": "openai", "url": url,
            "tls_ca": ca.pem}
    fields = _fields(api("post", "/backends", json=base))
    assert set(fields) == {"url"}
    assert fields["url"].startswith("is addressed by IP (")
    assert "set tls_server_name to a DNS name the backend's certificate carries" in fields["url"]

    b = make("backend", url=url, tls_ca=ca.pem, tls_server_name="llm.internal")
    assert b["tls_server_name"] == "llm.internal"
    # taking the name away again is refused; so is the form with verification left on
    r = api("patch", f"/backends/{b['id']}", json={"tls_server_name": None})
    assert set(_fields(r)) == {"url"}
    # verification turned off explicitly: nothing to name
    off = make("backend", url=url, tls_verify=False)
    assert off["tls_verify"] is False and off["tls_server_name"] is None
    r = api("patch", f"/backends/{off['id']}", json={"tls_verify": True})
    assert set(_fields(r)) == {"url"}
    # host names and plain http are not concerned
    assert make("backend", url="https://localhost:8443", tls_ca=ca.pem)["url"]
    assert make("backend", url="http://127.0.0.1:8000")["url"]


def test_a_preset_backend_by_ip_gets_the_same_answer(api, make):
    model = make("model")
    r = api("post", "/backends", json={"name": "p", "model_id": model["id"],
                                        "preset": "vllm",
                                        "base_url": "https://10.0.0.5:8000"})
    assert set(_fields(r)) == {"url"}
    r = api("post", "/backends", json={"name": "p", "model_id": model["id"],
                                        "preset": "vllm", "base_url": "https://10.0.0.5:8000",
                                        "tls_server_name": "vllm.internal"})
    assert r.status_code == 201, r.get_json()
