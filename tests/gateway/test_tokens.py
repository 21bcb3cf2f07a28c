"""Monthly token quotas: reserve prompt size + max_tokens before forwarding,
reconcile with the usage the backend reports (JSON body or the SSE stream's usage
event). The demo backend counts words: "hello there" -> 2 prompt tokens, answer
"echo: hello there" -> 3 completion tokens, 5 in all."""
from __future__ import annotations

import itertools
import json
import math
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from control_plane.runtime import procs

PLAN_KEY = "sk-test-tokens-0123456789abcdef"
USED = 5


# The module's tests share a gateway, whose counters are kept per consumer id: each
# snapshot gives PLAN_KEY a consumer never metered before, so its quota starts at zero.
_CONSUMER_IDS = itertools.count(3)


def metered(snap: dict, helpers, plan: dict) -> dict:
    """`snap` with PLAN_KEY's consumer (a new id) on plan 4 (`plan`, rate 1000/s)."""
    cid = next(_CONSUMER_IDS)
    snap["consumers"][str(cid)] = {"id": cid, "name": f"metered-{cid}",
                                   "allowed_models": None, "plan_id": 4}
    snap["keys"][helpers.key_hash(PLAN_KEY)] = {"id": 9, "consumer_id": cid,
                                                "prefix": PLAN_KEY[:10], "expires_at": None}
    snap["plans"] = {"4": {"id": 4, "name": "metered", "rate_per_second": 1000, **plan}}
    return snap


def token_snapshot(helpers, backends, plan: dict) -> dict:
    return metered(helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "chat-other": (5000, [backends["openai-b"].entry(2)])}), helpers, plan)


def payload(max_tokens=20, model="chat-demo", **extra) -> str:
    return json.dumps({"model": model, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "hello there"}], **extra})


def reserve(body: str) -> int:
    """What the gateway reserves for `body` (lua/sluice/tokens.lua)."""
    return math.ceil(len(body.encode()) / 4) + json.loads(body)["max_tokens"]


def call(gw, body: str, headers=None) -> requests.Response:
    h = {"Authorization": f"Bearer {PLAN_KEY}", "Content-Type": "application/json"}
    h.update(headers or {})
    return requests.post(gw.url + "/v1/chat/completions", data=body, headers=h, timeout=10)


def serve(gw, helpers, backends, plan):
    r = gw.push(token_snapshot(helpers, backends, plan))
    assert r.status_code == 200, r.text
    return gw


def test_usage_reconciles_the_reservation(gateway, helpers, backends):
    body = payload()
    r_size = reserve(body)
    quota = 100
    gw = serve(gateway, helpers, backends, {"monthly_tokens": quota})
    admitted = 0
    while True:
        r = call(gw, body)
        if r.status_code != 200:
            break
        assert r.json()["usage"]["total_tokens"] == USED
        admitted += 1
        assert admitted < 100
    err = helpers.assert_error(r, 429, "rate_limited")
    assert "monthly token quota" in err["message"] and err["retry_after"] >= 1
    # with reconciliation each request costs what it used, plus room for one reservation
    assert admitted == (quota - r_size) // USED + 1
    assert admitted > quota // r_size   # what counting reservations only would allow


def test_request_larger_than_quota_is_refused_up_front(gateway, helpers, backends):
    gw = serve(gateway, helpers, backends, {"monthly_tokens": 100})
    r = call(gw, payload(max_tokens=200))
    err = helpers.assert_error(r, 429, "rate_limited")
    assert "may use up to" in err["message"]
    assert call(gw, payload(max_tokens=20)).status_code == 200


def test_burst_of_long_requests_cannot_overrun(gateway, helpers, backends):
    body = payload(max_tokens=60)
    r_size = reserve(body)
    quota = 2 * r_size + r_size // 2       # room for two reservations, not three
    gw = serve(gateway, helpers, backends, {"monthly_tokens": quota})
    slow = {"X-Demo-Latency-Ms": "1000"}
    with ThreadPoolExecutor(5) as pool:
        results = [f.result() for f in [pool.submit(call, gw, body, slow) for _ in range(5)]]
    assert sorted(r.status_code for r in results) == [200, 200, 429, 429, 429]


def test_stream_usage_event_reconciles(gateway, helpers, backends):
    body = payload(stream=True, stream_options={"include_usage": True})
    r_size = reserve(body)
    # a second request fits only if the first was settled at its real usage
    gw = serve(gateway, helpers, backends, {"monthly_tokens": r_size + USED})
    r = call(gw, body)
    assert r.status_code == 200 and "[DONE]" in r.text
    assert call(gw, body).status_code == 200
    helpers.assert_error(call(gw, body), 429, "rate_limited")


def test_stream_without_usage_keeps_the_reservation(gateway, helpers, backends):
    body = payload(stream=True)
    r_size = reserve(body)
    gw = serve(gateway, helpers, backends, {"monthly_tokens": r_size + USED})
    assert call(gw, body).status_code == 200
    helpers.assert_error(call(gw, body), 429, "rate_limited")


def test_failed_backend_refunds_the_reservation(gateway, helpers, backends):
    body = payload()
    r_size = reserve(body)
    gw = serve(gateway, helpers, backends, {"monthly_tokens": r_size})
    for _ in range(3):
        r = call(gw, body, {"X-Demo-Status": "500"})
        helpers.assert_error(r, 502, "server_error")   # the OpenAI backend's own type
    assert call(gw, body).status_code == 200
    helpers.assert_error(call(gw, body), 429, "rate_limited")


def test_per_model_token_quota(gateway, helpers, backends):
    body = payload()
    gw = serve(gateway, helpers, backends, {
        "monthly_tokens": 10_000, "models": {"chat-other": {"monthly_tokens": reserve(body)}}})
    other = payload(model="chat-other")
    assert call(gw, other).status_code == 200
    helpers.assert_error(call(gw, other), 429, "rate_limited")
    assert call(gw, body).status_code == 200     # chat-demo draws on the plan's quota


def test_predict_requests_are_not_token_metered(gateway, helpers, backends):
    gw = gateway
    snap = token_snapshot(helpers, backends, {"monthly_tokens": 1})
    snap["models"]["predict-demo"] = {"id": 9, "name": "predict-demo", "timeout_ms": 5000,
                                      "backends": [backends["predict-a"].entry(3)]}
    assert gw.push(snap).status_code == 200
    r = requests.post(gw.url + "/v1/models/predict-demo/predict", json={"instances": ["a"]},
                      headers={"X-API-Key": PLAN_KEY}, timeout=10)
    assert r.status_code == 200, r.text


# Answers whose `usage` is laid out differently: the gateway reads the counts without
# decoding the whole answer when they come first, and falls back to a full decode
# when a nested object comes first. The answer's text quotes "usage" on purpose.
FIXED_ANSWERS = {
    "/counts-first/v1/chat/completions": {
        "id": "c1", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant",
                                             "content": 'say "usage": {"total_tokens": 1}'},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11,
                  "prompt_tokens_details": {"cached_tokens": 0}}},
    "/details-first/v1/chat/completions": {
        "id": "c2", "object": "chat.completion", "model": "m",
        "usage": {"prompt_tokens_details": {"cached_tokens": 2},
                  "completion_tokens_details": {"reasoning_tokens": 1},
                  "prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11},
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                     "finish_reason": "stop"}]},
}


def nginx_quoted(doc: dict) -> str:
    """JSON inside an nginx '…' string: nginx unescapes backslashes."""
    return json.dumps(doc).replace("\\", "\\\\")


@pytest.fixture
def fixed_backend(prefix):
    """A plain nginx answering FIXED_ANSWERS: a backend whose JSON we choose byte by byte."""
    root = prefix / "fixed"
    for sub in ("logs", "tmp", "conf"):
        (root / sub).mkdir(parents=True)
    port = procs.free_port()
    user = "user root;" if os.geteuid() == 0 else ""
    locations = "".join(
        f"location = {path} {{ default_type application/json; "
        f"return 200 '{nginx_quoted(doc)}'; }}\n" for path, doc in FIXED_ANSWERS.items())
    (root / "conf" / "nginx.conf").write_text(f"""{user}
worker_processes 1; pid logs/nginx.pid; error_log logs/error.log warn;
events {{ worker_connections 64; }}
http {{ access_log off; client_body_temp_path tmp; proxy_temp_path tmp;
  fastcgi_temp_path tmp; uwsgi_temp_path tmp; scgi_temp_path tmp;
  server {{ listen 127.0.0.1:{port}; {locations} }} }}
""")
    proc = procs.spawn(["nginx", "-p", str(root), "-c", "conf/nginx.conf", "-g", "daemon off;"],
                       log=root / "logs" / "stdout.log")
    try:
        procs.wait_port(port, timeout=10)
        yield port
    finally:
        procs.stop(proc)


@pytest.mark.parametrize("layout", ["counts-first", "details-first"])
def test_usage_is_read_whatever_its_layout(gateway, helpers, fixed_backend, layout):
    body = payload()
    r_size, used, quota = reserve(body), 11, 100
    backend = {"id": 1, "name": "fixed", "protocol": "openai", "scheme": "http",
               "host": "127.0.0.1", "port": fixed_backend,
               "host_header": f"localhost:{fixed_backend}", "base_path": f"/{layout}",
               "weight": 100}
    snap = metered(helpers.make_snapshot(1, {"chat-demo": (5000, [backend])}), helpers,
                   {"monthly_tokens": quota})
    gw = gateway
    assert gw.push(snap).status_code == 200
    admitted = 0
    while (r := call(gw, body)).status_code == 200:
        assert r.json()["usage"]["total_tokens"] == used
        admitted += 1
        assert admitted < 100
    helpers.assert_error(r, 429, "rate_limited")
    # each request is charged the 11 tokens the backend reported, not its reservation
    assert admitted == (quota - r_size) // used + 1
