"""Plans, JWT issuers and backend credentials through the admin API and into the
snapshot."""
from __future__ import annotations

import dataclasses
import json

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import jwks_sync


def _pem(public_key) -> str:
    return public_key.public_bytes(serialization.Encoding.PEM,
                                   serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def test_plan_crud_and_snapshot(api, make):
    plan = make("plan", name="gold", rate_per_second=5, rate_per_ip=0.5, burst=10,
                max_concurrent=3, daily_requests=1000, monthly_tokens=50000,
                model_overrides={"chat-demo": {"rate_per_second": 1, "monthly_tokens": 10}})
    assert plan["monthly_requests"] is None
    consumer = make("consumer", name="c1", plan_id=plan["id"])
    assert consumer["plan_id"] == plan["id"]

    snap = api("get", "/snapshot").get_json()
    assert snap["plans"] == {str(plan["id"]): {
        "id": plan["id"], "name": "gold", "rate_per_second": 5, "rate_per_ip": 0.5,
        "burst": 10,
        "max_concurrent": 3, "daily_requests": 1000, "monthly_requests": None,
        "monthly_tokens": 50000,
        "models": {"chat-demo": {"rate_per_second": 1, "monthly_tokens": 10}},
        "priority": "standard", "priority_header": False,
        "queue_timeout_ms": 2000,   # the standard class's wait (the plan sets none)
        "buffer_at_peak": False,
        "realtime_sessions": None, "realtime_session_s": None}}   # no realtime caps
    assert snap["consumers"][str(consumer["id"])]["plan_id"] == plan["id"]

    # a plan in use cannot go; once free it can
    r = api("delete", f"/plans/{plan['id']}")
    assert r.status_code == 409, r.get_json()
    assert api("patch", f"/consumers/{consumer['id']}", json={"plan_id": None}).status_code == 200
    assert api("delete", f"/plans/{plan['id']}").status_code == 204


def test_plan_defaults_to_100_per_second(make):
    plan = make("plan", name="default")
    assert plan["rate_per_second"] == 100 and plan["burst"] is None
    assert plan["rate_per_ip"] is None


def test_plan_validation(api, make):
    r = api("post", "/plans", json={"name": "x", "rate_per_second": 0, "burst": "many",
                                    "rate_per_ip": -1,
                                    "model_overrides": {"m": {"colour": 1}}})
    assert r.status_code == 422
    fields = r.get_json()["error"]["fields"]
    assert set(fields) == {"rate_per_second", "rate_per_ip", "burst", "model_overrides"}
    r = api("post", "/consumers", json={"name": "c", "plan_id": 999})
    assert r.status_code == 422
    assert "plan_id" in r.get_json()["error"]["fields"]


def test_backend_auth_header_is_write_only(api, make):
    backend = make("backend", auth_header="Bearer backend-secret-123")
    assert backend["auth_header_set"] is True
    assert "backend-secret-123" not in json.dumps(backend)
    got = api("get", f"/backends/{backend['id']}").get_json()
    assert got["auth_header_set"] is True and "auth_header" not in got
    # the admin view of the snapshot hides it too
    snap_text = api("get", "/snapshot").get_data(as_text=True)
    assert "backend-secret-123" not in snap_text
    r = api("patch", f"/backends/{backend['id']}", json={"auth_header": None})
    assert r.get_json()["auth_header_set"] is False
    r = api("patch", f"/backends/{backend['id']}", json={"auth_header": "a\nb"})
    assert r.status_code == 422


def test_backend_auth_header_in_pushed_snapshot(db_url, make):
    from control_plane.db import make_engine, make_sessionmaker
    from control_plane.services import snapshot
    backend = make("backend", auth_header="Bearer backend-secret-123")
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as session:
            snap = snapshot.build(session)
    finally:
        engine.dispose()
    entries = [b for m in snap["models"].values() for b in m["backends"]]
    assert [b.get("auth_header") for b in entries if b["id"] == backend["id"]] == \
        ["Bearer backend-secret-123"]


def test_jwt_issuer_from_pem_and_jwks(api, make):
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    ec_key = ec.generate_private_key(ec.SECP256R1()).public_key()
    one = make("jwt-issuer", name="idp-pem", pem=_pem(rsa_key), issuer="https://idp",
               audience="sluice", consumer_claim="client_id")
    assert [(k["alg"], k["kid"]) for k in one["keys"]] == [("RS256", None)]

    jwks = {"keys": [{**json.loads(RSAAlgorithm.to_jwk(rsa_key)), "kid": "r1"},
                     {**json.loads(ECAlgorithm.to_jwk(ec_key)), "kid": "e1"}]}
    two = make("jwt-issuer", name="idp-jwks", jwks=jwks)
    assert [(k["alg"], k["kid"]) for k in two["keys"]] == [("RS256", "r1"), ("ES256", "e1")]
    assert two["consumer_claim"] == "sub"

    snap = api("get", "/snapshot").get_json()
    assert snap["jwt"][str(one["id"])]["issuer"] == "https://idp"
    assert snap["jwt"][str(one["id"])]["consumer_claim"] == "client_id"
    assert snap["jwt"][str(two["id"])]["keys"][1]["pem"] == _pem(ec_key)

    # disabled issuers leave the snapshot (revocation within one push)
    api("patch", f"/jwt-issuers/{two['id']}", json={"enabled": False})
    assert str(two["id"]) not in api("get", "/snapshot").get_json()["jwt"]


def test_jwt_issuer_rejects_bad_keys(api):
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    private_pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    cases = [
        ({"name": "a"}, "pem"),
        ({"name": "a", "pem": "not a key"}, "pem"),
        ({"name": "a", "pem": _pem(weak.public_key())}, "pem"),
        ({"name": "a", "pem": private_pem}, "pem"),
        ({"name": "a", "pem": _pem(p384)}, "pem"),
        ({"name": "a", "jwks": {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}}, "jwks"),
        ({"name": "a", "jwks": {"keys": []}}, "jwks"),
        ({"name": "a", "jwks": {"kty": "RSA", "n": "!!", "e": "AQAB"}}, "jwks"),
        ({"name": "a", "jwks": json.loads(RSAAlgorithm.to_jwk(weak))}, "jwks"),
        ({"name": "a", "pem": _pem(p384), "consumer_claim": "bad claim"}, "consumer_claim"),
    ]
    for body, field in cases:
        r = api("post", "/jwt-issuers", json=body)
        assert r.status_code == 422, (body, r.get_json())
        assert field in r.get_json()["error"]["fields"], (body, r.get_json())


def test_content_policy_crud_and_snapshot(api, make):
    p = make("content-policy", name="no-secrets", terms=["Project Falcon", "project falcon"])
    assert p["terms"] == ["project falcon"] and p["model"] is None
    q = make("content-policy", name="chat", model="chat-demo", terms=["x"], enabled=False)
    snap = api("get", "/snapshot").get_json()
    assert snap["content_policies"] == [{"id": p["id"], "name": "no-secrets", "model": None,
                                         "terms": ["project falcon"]}]
    api("patch", f"/content-policies/{q['id']}", json={"enabled": True})
    assert len(api("get", "/snapshot").get_json()["content_policies"]) == 2
    r = api("post", "/content-policies", json={"name": "bad", "terms": []})
    assert r.status_code == 422 and "terms" in r.get_json()["error"]["fields"]


def test_jwt_issuer_by_jwks_uri(api, app, make):
    one = make("jwt-issuer", name="idp-url",
               jwks_uri="https://idp.example.com/.well-known/openid-configuration")
    assert one["jwks_uri"] == "https://idp.example.com/.well-known/openid-configuration"
    assert (one["keys"], one["retired_keys"]) == ([], [])
    assert (one["jwks_fetched_at"], one["jwks_last_error"]) == (None, None)
    # no keys until the controller's first fetch: in the snapshot with none
    assert api("get", "/snapshot").get_json()["jwt"][str(one["id"])]["keys"] == []

    # pasting a key stops the fetching
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    r = api("patch", f"/jwt-issuers/{one['id']}", json={"pem": _pem(key)})
    assert r.status_code == 200 and r.get_json()["jwks_uri"] is None
    assert [k["alg"] for k in r.get_json()["keys"]] == ["ES256"]

    cases = [
        ({"jwks_uri": "http://idp.example.com/jwks.json"}, "jwks_uri", "https://"),
        ({"jwks_uri": "ftp://idp.example.com/jwks.json"}, "jwks_uri", "URL"),
        ({"jwks_uri": "https://idp/jwks?x=1"}, "jwks_uri", "URL"),
        ({"jwks_uri": "https://idp/jwks", "pem": _pem(key)}, "jwks_uri", "one of"),
        ({}, "pem", "jwks_uri"),
    ]
    for extra, field, words in cases:
        r = api("post", "/jwt-issuers", json={"name": "bad", **extra})
        assert r.status_code == 422, (extra, r.get_json())
        assert words in r.get_json()["error"]["fields"][field], (extra, r.get_json())
    r = api("patch", f"/jwt-issuers/{one['id']}",
            json={"jwks_uri": "http://idp.example.com/jwks.json"})
    assert r.status_code == 422 and "jwks_uri" in r.get_json()["error"]["fields"]

    # SLUICE_JWKS_ALLOW_HTTP (tests and labs) lets plain http through
    app.config["SLUICE_SETTINGS"] = dataclasses.replace(app.config["SLUICE_SETTINGS"],
                                                        jwks_allow_http=True)
    lab = make("jwt-issuer", name="idp-lab", jwks_uri="http://127.0.0.1:9/jwks.json")
    assert lab["jwks_uri"] == "http://127.0.0.1:9/jwks.json"


def test_jwks_fetch_outcomes_reach_the_issuer_and_the_snapshot(api, make, db_url):
    key_a, key_b = (_pem(ec.generate_private_key(ec.SECP256R1()).public_key())
                    for _ in range(2))
    a, b = ({"kid": kid, "alg": "ES256", "pem": pem}
            for kid, pem in (("a", key_a), ("b", key_b)))
    issuer = make("jwt-issuer", name="idp-fetched", jwks_uri="https://idp.example/jwks")
    url = issuer["jwks_uri"]
    engine = make_engine(db_url)
    sessions = make_sessionmaker(engine)

    def record(fetched, error=None, url=url):
        with sessions() as session:
            return jwks_sync.record(session, issuer["id"], url, fetched, error, 600)

    def version():
        return api("get", "/config").get_json()["version"]

    def snapshot_pems():
        return [k["pem"] for k in
                api("get", "/snapshot").get_json()["jwt"][str(issuer["id"])]["keys"]]

    try:
        assert record([a]) is True
        v = version()
        assert record([a]) is False and version() == v        # unchanged: no bump
        assert record([b]) is True and version() == v + 1     # A retires
        shown = api("get", f"/jwt-issuers/{issuer['id']}").get_json()
        assert [k["kid"] for k in shown["keys"]] == ["b"]
        assert [k["kid"] for k in shown["retired_keys"]] == ["a"]
        assert shown["jwks_fetched_at"] and shown["jwks_last_error"] is None
        assert snapshot_pems() == [key_b, key_a]              # A verifies in its grace
        assert record(None, "https://idp.example/jwks: HTTP 500") is False
        shown = api("get", f"/jwt-issuers/{issuer['id']}").get_json()
        assert shown["jwks_last_error"] == "https://idp.example/jwks: HTTP 500"
        assert [k["kid"] for k in shown["keys"]] == ["b"]     # the last good set stays
        # a fetch of a URL the issuer no longer has changes nothing
        assert record([a], url="https://old.example/jwks") is False
    finally:
        engine.dispose()
