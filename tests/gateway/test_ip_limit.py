"""The listener-wide per-IP limit (snapshot section "ip_limit", SLUICE_IP_RATE): a
token bucket per client address, taken before the key lookup, so bad keys from one
address are cut to 429 after the burst while another address goes on; X-Forwarded-For
names the client only when the peer is a trusted proxy. Callers are told apart by the
loopback source address they connect from (127.0.0.0/8 is all loopback); each test
uses addresses of its own, since the module's gateway keeps its buckets."""
from __future__ import annotations

import http.client
import json

BAD_KEY = "sk-test-not-a-key-0123456789abcdef"


def limited(helpers, backends, version: int, trusted=()) -> dict:
    snap = helpers.make_snapshot(version, {"chat-demo": (5000, [backends["openai-a"].entry(1)])})
    # 0.01/s: no token comes back during the test, so the count is exact
    snap["ip_limit"] = {"rate": 0.01, "burst": 3, "trusted_proxies": list(trusted),
                        "ipv6_prefix": 64}
    return snap


def post(gw, source: str, key: str, xff: str | None = None, path="/v1/chat/completions"):
    """A chat request from `source` (a loopback address), or a GET of `path` when it is
    not the chat one; (status, headers, body)."""
    host, port = gw.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10,
                                      source_address=(source, 0))
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    if xff:
        headers["X-Forwarded-For"] = xff
    body = json.dumps({"model": "chat-demo", "messages": [{"role": "user", "content": "hi"}]})
    chat = path == "/v1/chat/completions"
    try:
        conn.request("POST" if chat else "GET", path, body=body if chat else None,
                     headers=headers)
        r = conn.getresponse()
        return r.status, r.headers, json.loads(r.read() or b"null")
    finally:
        conn.close()


def test_bad_keys_from_one_address_cut_after_the_burst(gateway, helpers, backends):
    r = gateway.push(limited(helpers, backends, 1))
    assert r.status_code == 200, r.text
    for _ in range(3):
        status, _, _ = post(gateway, "127.0.0.11", BAD_KEY)
        assert status == 403
    status, headers, body = post(gateway, "127.0.0.11", BAD_KEY)
    assert status == 429 and body["error"]["type"] == "rate_limited", body
    assert 90 <= body["error"]["retry_after"] <= 300
    assert headers["Retry-After"] == str(body["error"]["retry_after"])
    # a good key from the same address is cut too: the address's bucket is empty
    assert post(gateway, "127.0.0.11", helpers.KEY)[0] == 429
    # another address is not
    assert post(gateway, "127.0.0.12", helpers.KEY)[0] == 200
    assert post(gateway, "127.0.0.12", BAD_KEY)[0] == 403


def test_realtime_handshakes_count_too(gateway, helpers, backends):
    assert gateway.push(limited(helpers, backends, 1)).status_code == 200
    for _ in range(3):
        assert post(gateway, "127.0.0.13", BAD_KEY, path="/v1/realtime")[0] == 403
    status, headers, body = post(gateway, "127.0.0.13", BAD_KEY, path="/v1/realtime")
    assert status == 429 and body["error"]["type"] == "rate_limited", body
    assert "Retry-After" in headers


def test_no_section_no_limit(gateway, helpers, backends):
    snap = limited(helpers, backends, 1)
    snap["ip_limit"]["rate"] = None
    assert gateway.push(snap).status_code == 200
    for _ in range(6):
        assert post(gateway, "127.0.0.21", BAD_KEY)[0] == 403


def test_forwarded_for_honoured_only_from_a_trusted_proxy(gateway, helpers, backends):
    r = gateway.push(limited(helpers, backends, 1, trusted=["127.0.0.30/31"]))
    assert r.status_code == 200, r.text
    # through the trusted proxy 127.0.0.31: each client its own bucket
    for _ in range(3):
        assert post(gateway, "127.0.0.31", BAD_KEY, xff="198.51.100.1")[0] == 403
    assert post(gateway, "127.0.0.31", BAD_KEY, xff="198.51.100.1")[0] == 429
    # a caller's own claim left of the proxy's hop is not believed
    assert post(gateway, "127.0.0.31", BAD_KEY, xff="198.51.100.2, 198.51.100.1")[0] == 429
    assert post(gateway, "127.0.0.31", helpers.KEY, xff="198.51.100.2")[0] == 200
    # IPv6 clients count by their /64
    for i in range(3):
        assert post(gateway, "127.0.0.30", BAD_KEY, xff=f"2001:db8:1:2::{i}")[0] == 403
    assert post(gateway, "127.0.0.30", BAD_KEY, xff="2001:db8:1:2:ffff::9")[0] == 429
    assert post(gateway, "127.0.0.30", BAD_KEY, xff="2001:db8:1:3::1")[0] == 403
    # from an untrusted peer the header is ignored: the peer's own bucket counts
    for n in range(3):
        assert post(gateway, "127.0.0.32", BAD_KEY, xff=f"198.51.100.{50 + n}")[0] == 403
    assert post(gateway, "127.0.0.32", BAD_KEY, xff="198.51.100.99")[0] == 429


def test_a_bad_section_is_refused(gateway, helpers, backends):
    snap = limited(helpers, backends, 1, trusted=["not-a-network"])
    r = gateway.push(snap)
    assert r.status_code == 400, r.text
    assert "ip_limit.trusted_proxies[1]" in r.text


def test_a_plans_rate_per_ip(gateway, helpers, backends):
    planned = "sk-test-per-ip-plan-0123456789abcdef"
    snap = helpers.make_snapshot(1, {"chat-demo": (5000, [backends["openai-a"].entry(1)])})
    # 0.01/s: one token (a second's worth, rounded up), none back during the test
    helpers.add_planned(snap, planned, {"rate_per_second": 100, "rate_per_ip": 0.01})
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    assert post(gateway, "127.0.0.41", planned)[0] == 200
    status, headers, body = post(gateway, "127.0.0.41", planned)
    assert status == 429 and body["error"]["type"] == "rate_limited", body
    assert int(headers["Retry-After"]) >= 90
    # another address of the plan goes on; a consumer without the plan is not limited
    assert post(gateway, "127.0.0.42", planned)[0] == 200
    assert post(gateway, "127.0.0.41", helpers.KEY)[0] == 200
    assert post(gateway, "127.0.0.41", helpers.KEY)[0] == 200
    snap["plans"]["7"]["rate_per_ip"] = 0
    r = gateway.push(snap)
    assert r.status_code == 400 and "plans.7.rate_per_ip" in r.text, r.text
