"""HTTPS and mTLS to a backend through the whole stack: configured through the admin
API with its own CA, server name and client certificate, pushed by the controller,
loaded by the gateway's reload (what `sluice gateway` runs twice a second), probed
ready by the controller over TLS, and answering callers."""
from __future__ import annotations

from tlsutil import CA, tls_backend
from waiting import eventually


def test_an_mtls_backend_configured_through_the_api_serves_callers(stack, tmp_path):
    ca = CA(tmp_path / "ca")
    srv = tls_backend(ca.issue("llm", ["llm.internal"]), client_ca=ca, name="llm-tls")
    try:
        pair = ca.issue("gateway", client=True)
        admin = stack.admin
        model = admin.create("models", name="chat-tls", timeout_ms=5000)
        backend = admin.create("backends", name="llm-tls", model_id=model["id"],
                               url=f"https://127.0.0.1:{srv.port}", protocol="openai",
                               tls_ca=ca.pem, tls_server_name="llm.internal",
                               tls_client_cert=pair.cert_pem, tls_client_key=pair.key_pem)
        assert backend["tls_client_key_set"] is True and "tls_client_key" not in backend
        consumer = admin.create("consumers", name="t")
        key = admin.create("keys", consumer_id=consumer["id"])["key"]
        stack.wait_served()

        def answered():
            stack.gateway.sync_trust()   # the new CA: one reload
            r = stack.chat(key, "chat-tls")
            return r if r.status_code == 200 else None

        r = eventually(answered, 20)
        assert r.json()["choices"][0]["message"]["content"] == "echo: hello"

        # the controller's health probe reached it over mTLS too
        def probed_ready():
            report = admin._call("get", "/health").json()
            return [b["state"] for b in report["backends"]
                    if b["backend_id"] == backend["id"]] == ["ready"]
        eventually(probed_ready, 20)
        # the key is in no log: the gateway's, the API's, the controller's
        logs = [stack.gateway.error_log, *stack.tmp.glob("*.log")]
        assert len(logs) >= 3
        assert not [p for p in logs if "PRIVATE KEY" in p.read_text(errors="replace")]
    finally:
        srv.shutdown()
