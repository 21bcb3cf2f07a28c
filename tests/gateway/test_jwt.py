"""JWT bearer tokens: RS256 and ES256 verified in Lua against snapshot keys; every
way a token can be wrong is a 403 in the error template, never a 500."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

ISSUER = "https://idp.test"
AUDIENCE = "sluice"


def _pem(private_key) -> str:
    return private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


@pytest.fixture(scope="module")
def keys():
    return {"rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "rsa_other": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ec": ec.generate_private_key(ec.SECP256R1())}


def jwt_snapshot(helpers, backends, keys, version=1, rsa_expires_at=None, with_ec=True):
    snap = helpers.make_snapshot(version, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)])})
    snap["consumers"]["1"]["attributes"] = {"user_type": "basic", "region": "eu"}
    snap["jwt"] = {"1": {"id": 1, "name": "idp", "issuer": ISSUER, "audience": AUDIENCE,
                         "consumer_claim": "sub", "expires_at": rsa_expires_at,
                         "keys": [{"kid": "r1", "alg": "RS256", "pem": _pem(keys["rsa"])}]}}
    if with_ec:
        snap["jwt"]["2"] = {"id": 2, "name": "edge", "issuer": None, "audience": None,
                            "consumer_claim": "client", "expires_at": None,
                            "keys": [{"kid": None, "alg": "ES256", "pem": _pem(keys["ec"])}]}
    return snap


@pytest.fixture
def gw(gateway_factory, helpers, backends, keys):
    g = gateway_factory()
    r = g.push(jwt_snapshot(helpers, backends, keys))
    assert r.status_code == 200, r.text
    return g


def rs256(keys, key="rsa", kid="r1", **claims):
    now = int(time.time())
    body = {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "exp": now + 300, "iat": now}
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    headers = {"kid": kid} if kid else {}
    return pyjwt.encode(body, keys[key], algorithm="RS256", headers=headers)


def es256(keys, **claims):
    body = {"client": "bob", "exp": int(time.time()) + 300}
    body.update(claims)
    return pyjwt.encode(body, keys["ec"], algorithm="ES256")


def b64(obj) -> str:
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def hs256(secret: str, payload: str) -> str:
    h = b64({"alg": "HS256", "typ": "JWT", "kid": "r1"})
    mac = hmac.new(secret.encode(), f"{h}.{payload}".encode(), hashlib.sha256).digest()
    return f"{h}.{payload}.{b64(mac)}"


def forbidden(gw, helpers, token, fragment):
    err = helpers.assert_error(helpers.chat(gw, key=token), 403, "forbidden")
    assert fragment in err["message"], err
    return err


def test_rs256_and_es256_tokens_are_accepted(gw, helpers, keys):
    r = helpers.chat(gw, key=rs256(keys, user_type="vip"))
    assert r.status_code == 200, r.text
    assert r.headers["X-Demo-Saw-Authorization"] == "no"   # the token stays here
    # ES256, consumer named by another claim, no iss/aud configured; bob may use chat
    r = helpers.chat(gw, key=es256(keys))
    assert r.status_code == 200, r.text
    # the signature's integers can be shorter than 32 bytes or have the high bit
    # set: many tokens exercise every DER case of the r||s conversion
    for i in range(24):
        assert helpers.chat(gw, key=es256(keys, n=i)).status_code == 200


def test_audience_list_and_leeway(gw, helpers, keys):
    now = int(time.time())
    assert helpers.chat(gw, key=rs256(keys, aud=["other", AUDIENCE])).status_code == 200
    # 10 s past exp is inside the 30 s leeway for clock skew
    assert helpers.chat(gw, key=rs256(keys, exp=now - 10)).status_code == 200


def test_rejections(gw, helpers, keys):
    now = int(time.time())
    good = rs256(keys)
    head, payload, sig = good.split(".")
    cases = [
        # alg none, with and without a signature
        (b64({"alg": "none", "typ": "JWT"}) + "." + payload + ".", "alg none"),
        (b64({"alg": "none"}) + "." + payload + "." + sig, "alg none"),
        # HS256 "signed" with the RSA public key as the HMAC secret (key confusion)
        (hs256(_pem(keys["rsa"]), payload), "HS256"),
        (b64({"alg": "RS512", "kid": "r1"}) + "." + payload + "." + sig, "RS512"),
        # bad signatures
        (head + "." + b64({"sub": "alice", "iss": ISSUER, "aud": AUDIENCE,
                           "exp": now + 300, "admin": True}) + "." + sig, "signature"),
        (rs256(keys, key="rsa_other"), "signature"),
        (head + "." + payload + "." + b64(b"\x00" * 256), "signature"),
        (head + "." + payload + "." + b64(b"short"), "signature"),
        (es256(keys)[:-8] + "AAAAAAAA", "signature"),
        (es256(keys).rsplit(".", 1)[0] + "." + b64(b"\x01" * 70), "signature"),
        # a key id nobody has
        (rs256(keys, kid="nope"), "no key"),
        # time and claims
        (rs256(keys, exp=now - 120), "expired"),
        (rs256(keys, nbf=now + 120), "not valid yet"),
        (rs256(keys, exp="tomorrow"), "exp"),
        (rs256(keys, iss="https://evil.test"), "issuer"),
        (rs256(keys, iss=None), "issuer"),
        (rs256(keys, aud="someone-else"), "audience"),
        (rs256(keys, sub="mallory"), "no known consumer"),
        (rs256(keys, sub=None), "sub claim"),
        (rs256(keys, sub=12), "sub claim"),
        # malformed shapes
        ("a.b.c", "malformed"),
        ("..", "malformed"),
        (b64({"alg": "RS256"}) + "." + b64(b"not json") + "." + sig, "malformed"),
        (b64(b"[1,2]") + "." + payload + "." + sig, "no alg"),
        (b64({"alg": 5}) + "." + payload + "." + sig, "alg"),
        (b64({"alg": "RS256", "kid": 7}) + "." + payload + "." + sig, "malformed"),
        (head + "." + payload + ".!!!", "malformed"),
        (head + "." + payload + ".", "malformed"),
    ]
    for token, fragment in cases:
        forbidden(gw, helpers, token, fragment)


def test_oversized_tokens(gw, helpers, keys):
    forbidden(gw, helpers, rs256(keys, pad="x" * 4000), "too long")
    # past nginx's header buffer (8k): nginx's own refusal, still in the template
    r = helpers.chat(gw, key=rs256(keys, pad="x" * 12000))
    err = helpers.assert_error(r, 400, "invalid_request")
    assert "headers are too large" in err["message"]


def test_issuer_expiry_and_revocation_take_effect_with_one_push(gw, helpers, backends, keys):
    token = rs256(keys)
    assert helpers.chat(gw, key=token).status_code == 200     # now cached as verified
    expired = jwt_snapshot(helpers, backends, keys, version=2,
                           rsa_expires_at=int(time.time()) - 1)
    assert gw.push(expired).status_code == 200
    forbidden(gw, helpers, token, "expired")
    revoked = jwt_snapshot(helpers, backends, keys, version=3)
    del revoked["jwt"]["1"]
    assert gw.push(revoked).status_code == 200
    forbidden(gw, helpers, token, "no key")
    assert helpers.chat(gw, key=es256(keys)).status_code == 200


def test_tokens_never_logged(gw, helpers, keys):
    token = rs256(keys)
    helpers.chat(gw, key=token)
    forbidden(gw, helpers, rs256(keys, exp=int(time.time()) - 120), "expired")
    log = gw.error_log.read_text(errors="replace")
    assert token.split(".")[2] not in log and token.split(".")[1] not in log


def test_invalid_jwt_sections_are_refused(gateway_factory, helpers, backends, keys):
    g = gateway_factory()
    for mutate, fragment in (
            (lambda s: s["jwt"]["1"].update(keys="x"), "keys"),
            (lambda s: s["jwt"]["1"]["keys"][0].update(alg="HS256"), "alg"),
            (lambda s: s["jwt"]["1"].update(issuer=5), "issuer"),
            (lambda s: s["jwt"]["1"].update(expires_at="soon"), "expires_at")):
        snap = jwt_snapshot(helpers, backends, keys)
        mutate(snap)
        r = g.push(snap)
        assert r.status_code == 400 and fragment in r.json()["error"]["message"], r.text
