"""JWT issuers by jwks_uri (issue 31): the controller fetches an identity provider's
keys (here through OIDC discovery, from a JWKS server the test runs) and follows
their rotation; tokens keep passing through it, under load; a key that leaves the set
verifies for SLUICE_JWKS_GRACE_S then stops; a failing fetch keeps the last keys."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt as pyjwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from control_plane.runtime import procs
from waiting import eventually

INTERVAL_S = 0.5
GRACE_S = 4.0


class JwksServer:
    """An identity provider's public side: /<idp>/.well-known/openid-configuration
    naming /<idp>/jwks.json; `keys[idp]` is what it serves, `failing` the idps that
    answer 500."""

    def __init__(self) -> None:
        self.keys: dict[str, list[dict]] = {}
        self.failing: set[str] = set()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                idp, _, rest = self.path.strip("/").partition("/")
                if idp in outer.failing or idp not in outer.keys:
                    return self._send(500, {"error": "down"})
                if rest == ".well-known/openid-configuration":
                    return self._send(200, {"issuer": f"{outer.url}/{idp}",
                                            "jwks_uri": f"{outer.url}/{idp}/jwks.json"})
                self._send(200, {"keys": list(outer.keys[idp])})

            def _send(self, status: int, doc: dict) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Key:
    def __init__(self, kid: str) -> None:
        self.kid = kid
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.jwk = {**json.loads(RSAAlgorithm.to_jwk(self.private.public_key())),
                    "kid": kid, "use": "sig", "alg": "RS256"}

    def token(self, sub: str) -> str:
        return pyjwt.encode({"sub": sub, "exp": int(time.time()) + 600}, self.private,
                            algorithm="RS256", headers={"kid": self.kid})


@pytest.fixture(scope="module")
def idp(stack):
    """The module's stack with fast JWKS settings (its API and controller restarted
    with them), a chat model and a JWKS server."""
    metrics_port = procs.free_port()
    stack.stop("api")
    stack.stop("controller")
    stack.extra_env.update(SLUICE_JWKS_INTERVAL=str(INTERVAL_S), SLUICE_JWKS_GRACE_S=str(GRACE_S),
                           SLUICE_JWKS_ALLOW_HTTP="1",
                           SLUICE_CONTROLLER_METRICS_PORT=str(metrics_port))
    stack.start_api()
    stack.start_controller()
    url = stack.start_backend("jwks-chat")
    model = stack.admin.create("models", name="jwks-chat", timeout_ms=5000)
    stack.admin.create("backends", name="jwks-chat", model_id=model["id"], url=url,
                       protocol="openai", weight=100)
    server = JwksServer()
    server.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    yield server
    server.close()


def _issuer(stack, server: JwksServer, name: str, keys: list[Key]) -> dict:
    server.keys[name] = [k.jwk for k in keys]
    stack.admin.create("consumers", name=f"{name}-caller")
    return stack.admin.create(
        "jwt-issuers", name=name,
        jwks_uri=f"{server.url}/{name}/.well-known/openid-configuration")


def _status(stack, key: Key, caller: str) -> int:
    return stack.chat(key.token(caller), "jwks-chat").status_code


def test_rotation_under_load_and_the_grace_of_a_departed_key(stack, idp):
    a, b = Key("a"), Key("b")
    _issuer(stack, idp, "rot", [a])
    caller = "rot-caller"
    eventually(lambda: _status(stack, a, caller) == 200, timeout=15,
               message="a token signed by key A never passed")

    failures: list[tuple[str, int]] = []
    sent = {"a": 0, "b": 0}
    valid = {"a"}          # the keys whose tokens must pass now
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            for key in (a, b):
                if key.kid in valid:
                    status = _status(stack, key, caller)
                    sent[key.kid] += 1
                    if status != 200:
                        failures.append((key.kid, status))

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        # the provider publishes B beside A: B passes within the fetch interval
        idp.keys["rot"] = [a.jwk, b.jwk]
        started = time.monotonic()
        eventually(lambda: _status(stack, b, caller) == 200, timeout=10,
                   message="a token signed by the new key B never passed")
        assert time.monotonic() - started < 60
        valid.add("b")
        # then drops A: A tokens still pass during the grace
        idp.keys["rot"] = [b.jwk]
        removed = time.monotonic()
        eventually(lambda: stack.admin.find("jwt-issuers", "rot")["retired_keys"],
                   timeout=10, message="key A never retired")
        while time.monotonic() < removed + GRACE_S / 2:
            time.sleep(0.05)   # the load thread keeps sending A and B meanwhile
        valid.discard("a")
        # after the grace (plus a fetch interval) A stops; B goes on
        eventually(lambda: _status(stack, a, caller) != 200, timeout=GRACE_S + 10,
                   message="key A still verifies after its grace")
        assert time.monotonic() - removed >= GRACE_S
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(timeout=15)
    assert failures == [] and sent["a"] > 10 and sent["b"] > 10, (failures, sent)
    assert _status(stack, b, caller) == 200
    shown = stack.admin.find("jwt-issuers", "rot")
    assert [k["kid"] for k in shown["keys"]] == ["b"] and shown["retired_keys"] == []


def test_a_failing_fetch_keeps_the_last_keys_and_shows_the_error(stack, idp):
    c = Key("c")
    issuer = _issuer(stack, idp, "flaky", [c])
    caller = "flaky-caller"
    eventually(lambda: _status(stack, c, caller) == 200, timeout=15)
    # an unchanged set bumps nothing: fetches go on, the config version stays
    version = stack.admin.config_version()
    first = stack.admin.get("jwt-issuers", issuer["id"])["jwks_fetched_at"]
    eventually(lambda: stack.admin.get("jwt-issuers", issuer["id"])["jwks_fetched_at"]
               > first, timeout=10)
    assert stack.admin.config_version() == version

    idp.failing.add("flaky")
    shown = eventually(lambda: (s := stack.admin.get("jwt-issuers", issuer["id"]))
                       ["jwks_last_error"] and s, timeout=10)
    assert "HTTP 500" in shown["jwks_last_error"], shown
    assert [k["kid"] for k in shown["keys"]] == ["c"]
    assert _status(stack, c, caller) == 200
    metrics = requests.get(idp.metrics_url, timeout=5).text
    assert 'sluice_jwks_fetch_failures_total{issuer="flaky"}' in metrics, metrics[-2000:]

    # a JWKS that parses but holds no usable key (a shared secret) fails the same way
    idp.keys["flaky"] = [{"kty": "oct", "k": "c2VjcmV0", "kid": "s"}]
    idp.failing.discard("flaky")
    eventually(lambda: "kty must be RSA or EC" in (stack.admin.get(
        "jwt-issuers", issuer["id"])["jwks_last_error"] or ""), timeout=10)
    assert _status(stack, c, caller) == 200

    idp.keys["flaky"] = [c.jwk]
    eventually(lambda: stack.admin.get("jwt-issuers", issuer["id"])["jwks_last_error"]
               is None, timeout=10)
    assert _status(stack, c, caller) == 200
