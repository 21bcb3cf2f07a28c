"""Per-model fallback on timeout (lua/sluice/fallback.lua): a model whose backend
times out is answered by its `fallback_model`, converted to the caller's protocol,
with X-Sluice-Fallback; only on a timeout, only before anything was sent."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import requests
from gateway_readings import access_lines
from waiting import eventually

from control_plane.runtime import procs

REPO = Path(__file__).resolve().parents[2]
SLOW_MS = 4000      # how long the slow backends take to answer
TIMEOUT_MS = 400    # the precise model's timeout: well under SLOW_MS
PLAN_KEY = "sk-test-planned-0123456789abcdef"


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    """Demo backends that answer only after SLOW_MS (openai and predict)."""
    log_dir = tmp_path_factory.mktemp("slow-backends")
    started = {}
    try:
        for protocol in ("openai", "predict"):
            port = procs.free_port()
            name = f"slow-{protocol}"
            proc = procs.spawn([sys.executable, "-m", "control_plane.demo.backends",
                                "--protocol", protocol, "--port", str(port), "--name", name,
                                "--latency-ms", str(SLOW_MS)],
                               log=log_dir / f"{name}.log", cwd=REPO)
            started[protocol] = (name, port, proc)
            procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
        yield {p: {"name": n, "port": port} for p, (n, port, _) in started.items()}
    finally:
        for _, _, proc in started.values():
            procs.stop(proc)


def entry(id_, name, protocol, port):
    return {"id": id_, "name": name, "protocol": protocol, "scheme": "http",
            "host": "127.0.0.1", "port": port, "host_header": f"localhost:{port}",
            "base_path": "", "weight": 100}


def snapshot(helpers, backends, protocol_backends, slow, fallback="fast"):
    """`precise` (openai, slow) and `precise-cv` (predict, slow) fall back to `fast`
    (openai-a) and `fast-cv` (kserve_v2); `plain` is slow with no fallback;
    `doubly-slow` falls back to a model that is slow too."""
    snap = helpers.make_snapshot(1, {
        "precise": (TIMEOUT_MS, [entry(11, "slow-openai", "openai", slow["openai"]["port"])]),
        "fast": (5000, [backends["openai-a"].entry(12)]),
        "precise-cv": (TIMEOUT_MS, [entry(13, "slow-predict", "predict",
                                          slow["predict"]["port"])]),
        "fast-cv": (5000, [protocol_backends["kserve_v2"].entry(14)]),
        "plain": (TIMEOUT_MS, [entry(15, "slow-openai", "openai", slow["openai"]["port"])]),
        "doubly-slow": (TIMEOUT_MS, [entry(16, "slow-openai", "openai",
                                           slow["openai"]["port"])]),
        "also-slow": (TIMEOUT_MS, [entry(17, "slow-openai", "openai",
                                         slow["openai"]["port"])]),
        "refused": (5000, [entry(18, "nobody", "openai", procs.free_port())]),
    })
    m = snap["models"]
    m["precise"]["fallback_model"] = fallback
    m["precise-cv"]["fallback_model"] = "fast-cv"
    m["doubly-slow"]["fallback_model"] = "also-slow"
    m["refused"]["fallback_model"] = "fast"
    m["plain"]["fallback_model"] = None
    return snap


@pytest.fixture
def gw(gateway, helpers, backends, protocol_backends, slow):
    """The module's gateway serving `snapshot`."""
    r = gateway.push(snapshot(helpers, backends, protocol_backends, slow))
    assert r.status_code == 200, r.text
    return gateway


@pytest.fixture
def own_gw(own_gateway, helpers, backends, protocol_backends, slow):
    """A gateway of the test's own serving `snapshot`, for a test that reads the
    fallback and backend counters from zero."""
    r = own_gateway.push(snapshot(helpers, backends, protocol_backends, slow))
    assert r.status_code == 200, r.text
    return own_gateway


def post(gw, path, body, key=None, headers=None, **kw):
    h = {"Authorization": f"Bearer {key or 'sk-test-alice-0123456789abcdef'}"}
    h.update(headers or {})
    return requests.post(gw.url + path, json=body, headers=h, timeout=30, **kw)


def metric(gw, name, **labels):
    text = requests.get(gw.internal_url + "/metrics", timeout=5,
                        headers={"Authorization": f"Bearer {gw.cfg.token}"}).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{{{want}}} in /metrics")




def test_timeout_answers_with_the_fallback_model(own_gw, helpers):
    gw = own_gw
    started = time.monotonic()
    r = helpers.chat(gw, model="precise")
    elapsed = time.monotonic() - started
    assert r.status_code == 200, r.text
    assert r.headers["X-Sluice-Fallback"] == "fast"
    assert r.headers["X-Demo-Backend"] == "openai-a"
    doc = r.json()
    assert doc["choices"][0]["message"]["content"] == "echo: hello there"
    # the caller did not wait for the slow backend
    assert elapsed < SLOW_MS / 1000, elapsed
    assert metric(gw, "sluice_fallbacks_total", model="precise", fallback="fast",
                  outcome="sent") == 1
    line = [x for x in access_lines(gw, 1) if x["model"] == "precise"][0]
    assert line["fallback"] == "fast" and line["backend"] == "openai-a"
    assert line["status"] == "200"
    # both attempts reach the stats: the slow backend failed, the fallback worked
    stats = gw.stats()["backends"]
    assert stats["11"]["failures"] == 1 and stats["12"]["successes"] == 1


def test_fallback_speaks_the_callers_protocol(gw, helpers):
    # KServe v1 caller, slow predict backend, fallback on an OIP v2 backend
    r = post(gw, "/v1/models/precise-cv/predict", {"instances": [[1, 2], [3, 4]]})
    assert r.status_code == 200, r.text
    assert r.headers["X-Sluice-Fallback"] == "fast-cv"
    assert r.headers["X-Demo-Backend"] == "kserve_v2"
    assert len(r.json()["predictions"]) == 2
    # a converted first attempt: the fallback still gets the caller's own body
    r = post(gw, "/api/v1/model/precise-cv/infer", {"input": [1, 2]})
    assert r.status_code == 200, r.text
    assert r.headers["X-Sluice-Fallback"] == "fast-cv"
    assert r.json()["model"] == "fast-cv" and r.json()["output"]


def test_without_fallback_a_timeout_is_504(gw, helpers):
    r = helpers.chat(gw, model="plain")
    helpers.assert_error(r, 504, "backend_timeout")
    assert "X-Sluice-Fallback" not in r.headers


def test_fallback_that_times_out_too_is_504(own_gw, helpers):
    gw = own_gw
    r = helpers.chat(gw, model="doubly-slow")
    err = helpers.assert_error(r, 504, "backend_timeout")
    assert "in time" in err["message"]
    assert r.headers["X-Sluice-Fallback"] == "also-slow"
    assert metric(gw, "sluice_fallbacks_total", model="doubly-slow", fallback="also-slow",
                  outcome="failed") == 1


def test_other_errors_do_not_fall_back(gw, helpers):
    r = helpers.chat(gw, model="refused")       # connection refused: 502
    helpers.assert_error(r, 502, "backend_error")
    assert "X-Sluice-Fallback" not in r.headers


def test_stream_falls_back_before_the_first_byte(gw, helpers):
    r = helpers.chat(gw, model="precise", stream=True)
    assert r.status_code == 200, r.text
    assert r.headers["X-Sluice-Fallback"] == "fast"
    assert r.headers["Content-Type"].startswith("text/event-stream")
    assert r.text.rstrip().endswith("data: [DONE]")


def test_stream_that_stalls_midway_is_cut_not_replaced(gateway, helpers, backends):
    gw = gateway
    snap = helpers.make_snapshot(1, {"chatty": (TIMEOUT_MS, [backends["openai-a"].entry(1)]),
                                     "fast": (5000, [backends["openai-b"].entry(2)])})
    snap["models"]["chatty"]["fallback_model"] = "fast"
    assert gw.push(snap).status_code == 200
    body = {"model": "chatty", "stream": True,
            "messages": [{"role": "user", "content": "hello there"}]}
    r = post(gw, "/v1/chat/completions", body, stream=True,
             headers={"X-Demo-Chunk-Delay-Ms": str(TIMEOUT_MS * 4)})
    assert r.status_code == 200
    assert "X-Sluice-Fallback" not in r.headers
    assert r.headers["X-Demo-Backend"] == "openai-a"
    received = []
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        for chunk in r.iter_content(chunk_size=None):
            received.append(chunk)
    text = b"".join(received).decode()
    assert '"role": "assistant"' in text or '"role":"assistant"' in text  # it had started
    assert "[DONE]" not in text    # cut after the stall; no second answer spliced in


def test_limits_are_charged_once(gateway, helpers, backends, protocol_backends, slow):
    gw = gateway
    snap = snapshot(helpers, backends, protocol_backends, slow)
    helpers.add_planned(snap, PLAN_KEY, {"rate_per_second": None, "burst": None,
                                         "max_concurrent": 1, "daily_requests": 2,
                                         "monthly_requests": None, "monthly_tokens": None})
    assert gw.push(snap).status_code == 200
    body = {"model": "precise", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(2):
        # one concurrency slot, held through the fallback (not taken twice) and freed
        r = post(gw, "/v1/chat/completions", body, key=PLAN_KEY)
        assert r.status_code == 200, r.text
        assert r.headers["X-Sluice-Fallback"] == "fast"
    # the slot goes back in the log phase, after the answer left: with two workers a
    # third request can come in between (then it is refused for the slot, and the
    # daily count is not taken); the slot must be free soon, and the quota then full
    deadline = time.monotonic() + 5
    while True:
        r = post(gw, "/v1/chat/completions", body, key=PLAN_KEY)
        err = helpers.assert_error(r, 429, "rate_limited")   # never a third answer
        if "concurrent" not in err["message"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert "daily" in err["message"]


def test_snapshot_refuses_a_model_falling_back_to_itself(gateway, helpers, backends):
    snap = helpers.make_snapshot(1, {"a": (1000, [backends["openai-a"].entry(1)])})
    snap["models"]["a"]["fallback_model"] = "a"
    r = gateway.push(snap)
    err = helpers.assert_error(r, 400, "invalid_request")
    assert "fallback_model" in err["message"]


def test_fallback_frees_the_request_context(gw, helpers):
    # error_page -> ngx.exec(@sluice_fallback) -> log: one context, restored twice
    r = helpers.chat(gw, model="precise")
    assert r.status_code == 200 and r.headers["X-Sluice-Fallback"] == "fast"

    def held():
        text = requests.get(gw.internal_url + "/metrics", timeout=5,
                            headers={"Authorization": f"Bearer {gw.cfg.token}"}).text
        values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith("sluice_request_contexts{")]
        return len(values) == gw.cfg.workers and all(v == 0 for v in values)
    eventually(held, timeout=10)
