"""Policy configured through the admin API, enforced by the gateway after one push:
plans, JWT issuers, backend credentials."""
from __future__ import annotations

import hashlib
import time

import jwt as pyjwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def test_plan_assigned_through_admin_api_limits_requests(own_stack, demo):
    stack = own_stack  # it puts the demo's consumer on a plan: a stack of its own
    admin = stack.admin
    plan = admin.create("plans", name="tiny", rate_per_second=0.01, burst=2)
    admin.update("consumers", demo["consumer"]["id"], plan_id=plan["id"])
    stack.wait_served()
    key = demo["key"]["key"]
    statuses = [stack.chat(key, "chat-demo").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    # a bigger plan takes effect with the next push (the bucket itself is kept)
    admin.update("plans", plan["id"], burst=10)
    stack.wait_served()
    assert stack.chat(key, "chat-demo").status_code == 200


def test_jwt_issuer_through_admin_api_and_revocation(own_stack, demo):
    stack = own_stack  # its demo's names are another test's too: a stack of its own
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    issuer = stack.admin.create("jwt-issuers", name="idp", pem=pem, issuer="https://idp",
                                audience="sluice")
    stack.wait_served()
    token = pyjwt.encode({"sub": demo["consumer"]["name"], "iss": "https://idp",
                          "aud": "sluice", "exp": int(time.time()) + 300},
                         private, algorithm="ES256")
    r = stack.chat(token, "chat-demo")
    assert r.status_code == 200, r.text

    stack.admin.update("jwt-issuers", issuer["id"], enabled=False)
    stack.wait_served()
    r = stack.chat(token, "chat-demo")
    assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden"


def test_backend_credential_set_through_admin_api(own_stack, demo):
    stack = own_stack  # it sets the demo backend's credential: a stack of its own
    stack.admin.update("backends", demo["backend"]["id"], auth_header="Bearer vendor-secret")
    stack.wait_served()
    r = stack.chat(demo["key"]["key"], "chat-demo")
    assert r.status_code == 200
    assert r.headers["X-Demo-Authorization-Sha256"] == \
        hashlib.sha256(b"Bearer vendor-secret").hexdigest()
    shown = stack.admin.get("backends", demo["backend"]["id"])
    assert shown["auth_header_set"] is True and "auth_header" not in shown
