"""Pure logic of TLS to backends: trust ids, the rendered TLS locations, and that a
BackendTLS never shows its key."""
from __future__ import annotations

from control_plane.clients.backend_tls import BackendTLS, trust_id
from control_plane.runtime import backend_trust

CA_A = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
CA_B = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n"


def _snap(*backends):
    return {"models": {"m": {"backends": list(backends)}}}


def _https(verify=True, ca=None):
    tls = {"verify": verify, "server_name": "h", "trust": trust_id(verify, ca)}
    if ca:
        tls["ca"] = ca
    return {"scheme": "https", "tls": tls}


def test_trust_ids():
    assert trust_id(True, None) == "system"
    assert trust_id(False, CA_A) == "noverify"
    assert trust_id(True, CA_A) == trust_id(True, CA_A) != trust_id(True, CA_B)
    assert trust_id(True, CA_A).startswith("ca-") and len(trust_id(True, CA_A)) == 19


def test_needed_are_the_distinct_custom_cas():
    snap = _snap(_https(ca=CA_A), _https(ca=CA_A), _https(ca=CA_B), _https(),
                 _https(verify=False), {"scheme": "http"})
    assert backend_trust.needed(snap) == {trust_id(True, CA_A): CA_A,
                                          trust_id(True, CA_B): CA_B}
    assert backend_trust.needed(None) == {}


def test_write_renders_a_location_per_trust_set_and_drops_old_cas(tmp_path):
    a, b = trust_id(True, CA_A), trust_id(True, CA_B)
    backend_trust.write(tmp_path, {a: CA_A, b: CA_B})
    conf = (tmp_path / "backend_tls.conf").read_text()
    for name in ("system", "noverify", "noverify_mtls", "system_mtls", a, a + "_mtls", b,
                 b + "_mtls"):
        assert f"location @sluice_tls_{name} {{" in conf
        # its twin for the subrequest of an answer converted whole (relay.lua)
        assert f"location = /_sluice/buffered_tls/{name} {{" in conf
    # "system" too: location / proxies to plain backends only (nginx.conf.tmpl)
    assert conf.count("internal;") == 8
    assert conf.count("proxy_ssl_certificate data:$sluice_tls_cert;") == 8
    assert (tmp_path / "tls" / f"{a}.pem").read_text() == CA_A
    assert backend_trust.rendered(tmp_path) == {a, b}

    backend_trust.write(tmp_path, {a: CA_A})
    assert not (tmp_path / "tls" / f"{b}.pem").exists()
    assert backend_trust.rendered(tmp_path) == {a}


def test_backend_tls_never_shows_its_key():
    tls = BackendTLS(server_name="h", client_cert="CERT-PEM", client_key="SECRET-KEY-PEM")
    assert "SECRET" not in repr(tls) and "SECRET" not in str(tls)
    assert "SECRET" not in tls.key()
    assert BackendTLS.for_url("http://h:1") is None
    assert BackendTLS.for_url("https://Api.Example.com:8443/v1").server_name == \
        "api.example.com"
