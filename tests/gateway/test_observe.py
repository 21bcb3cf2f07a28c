"""Gateway observability: /metrics on the internal listener (checked with the real
Prometheus parser) and one JSON access-log line per public request."""
from __future__ import annotations

import json
import time

import pytest
import requests
from gateway_readings import access_lines, scrape, value


@pytest.fixture
def served(own_gateway, default_snapshot):
    """A gateway of its own serving `default_snapshot`: these tests count metrics and
    access-log lines from a fresh start."""
    assert own_gateway.push(default_snapshot).status_code == 200
    return own_gateway


def test_metrics_need_the_token(own_gateway, helpers):
    r = requests.get(own_gateway.internal_url + "/metrics", timeout=5)
    helpers.assert_error(r, 401, "unauthorized")
    r = requests.get(own_gateway.internal_url + "/metrics", timeout=5,
                     headers={"Authorization": "Bearer wrong-token-wrong-token"})
    helpers.assert_error(r, 403, "forbidden")
    r = requests.post(own_gateway.internal_url + "/metrics", timeout=5,
                      headers={"Authorization": f"Bearer {own_gateway.cfg.token}"})
    helpers.assert_error(r, 405, "method_not_allowed")


def test_requests_latency_and_snapshot_metrics(own_gateway, backends, helpers, dead_port):
    snap = helpers.make_snapshot(7, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "dead-demo": (5000, [{**backends["openai-b"].entry(2, name="dead-b"),
                              "port": dead_port}]),
    })
    assert own_gateway.push(snap).status_code == 200
    empty = scrape(own_gateway)
    assert value(empty, "sluice_snapshot_version") == 7
    assert 0 <= value(empty, "sluice_snapshot_age_seconds") < 60

    for _ in range(5):
        assert helpers.chat(own_gateway).status_code == 200
    helpers.assert_error(helpers.chat(own_gateway, key="sk-wrong-0123456789"), 403, "forbidden")
    helpers.assert_error(helpers.chat(own_gateway, model="no-such-model-x1"), 404, "not_found")
    helpers.assert_error(helpers.chat(own_gateway, model="dead-demo"), 502, "backend_error")

    m = scrape(own_gateway)
    ok = dict(model="chat-demo", backend="openai-a", plan="none")
    assert value(m, "sluice_requests_total", status="200", **ok) == 5
    assert value(m, "sluice_requests_total", status="403", model="", backend="") == 1
    # an unknown model name from the caller never becomes a label value
    assert value(m, "sluice_requests_total", status="404", model="", backend="") == 1
    assert "no-such-model-x1" not in json.dumps([s.labels for v in m.values() for s in v])
    # error_page's redirect keeps what the access phase learnt
    assert value(m, "sluice_requests_total", status="502", model="dead-demo",
                 backend="dead-b", plan="none") == 1

    for fam in ("sluice_request_duration_seconds", "sluice_upstream_duration_seconds"):
        count = value(m, fam + "_count", model="chat-demo", backend="openai-a")
        assert count == 5
        buckets = sorted((float(s.labels["le"]), s.value) for s in m[fam + "_bucket"]
                         if s.labels["model"] == "chat-demo")
        assert buckets[-1] == (float("inf"), 5)
        assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))  # cumulative
        assert 0 < value(m, fam + "_sum", model="chat-demo", backend="openai-a") < 5 * 5
    sq = value(m, "sluice_upstream_duration_seconds_squared_total", model="chat-demo",
               backend="openai-a")
    total = value(m, "sluice_upstream_duration_seconds_sum", model="chat-demo",
                  backend="openai-a")
    assert 0 < sq <= total * total   # sum of squares <= square of the sum
    # the total also covers requests refused before any backend
    assert value(m, "sluice_request_duration_seconds_count", model="", backend="") == 2


def test_one_json_line_per_request_without_secrets(served, helpers):
    ids = [f"req-observe-{i}" for i in range(3)]
    for rid in ids:
        assert helpers.chat(served, headers={"X-Request-Id": rid}).status_code == 200
    r = requests.post(served.url + "/v1/models/predict-demo/predict", timeout=10,
                      json={"instances": ["x"]},
                      headers={"X-API-Key": helpers.KEY_LIMITED, "X-Request-Id": "req-observe-403"})
    helpers.assert_error(r, 403, "forbidden")
    lines = access_lines(served, 4)
    # each worker has its own buffer: lines of two workers may interleave
    lines.sort(key=lambda line: line["request_id"])
    assert [line["request_id"] for line in lines] == ids + ["req-observe-403"]
    first = lines[0]
    assert first["consumer"] == "alice" and first["model"] == "chat-demo"
    assert first["backend"] == "openai-a" and first["status"] == "200"
    assert first["plan"] == "none" and first["error_type"] == ""
    assert first["path"] == "/v1/chat/completions" and first["method"] == "POST"
    assert int(first["latency_ms"]) >= 0 and int(first["upstream_ms"]) >= 0
    assert int(first["latency_ms"]) >= int(first["upstream_ms"])
    assert float(first["time"]) > time.time() - 60
    refused = lines[3]
    assert refused["status"] == "403" and refused["error_type"] == "forbidden"
    # bob may not use predict-demo: the line says who and what
    assert refused["model"] == "predict-demo" and refused["consumer"] == "bob" and refused["path"] == "/v1/models/predict-demo/predict"
    assert refused["upstream_ms"] == ""
    text = (served.prefix / "logs" / "access.log").read_text()
    for secret in (helpers.KEY, helpers.KEY_LIMITED, served.cfg.token):
        assert secret not in text


def test_internal_listener_is_not_logged(gateway_factory, default_snapshot, helpers):
    served = gateway_factory()  # it counts every request from zero: a gateway of its own
    assert served.push(default_snapshot).status_code == 200
    served.snapshot_status()
    assert helpers.chat(served).status_code == 200
    lines = access_lines(served, 1)
    time.sleep(1.5)   # one more flush interval: nothing else may appear
    lines = access_lines(served, 1)
    assert len(lines) == 1 and lines[0]["path"] == "/v1/chat/completions"
    m = scrape(served)
    assert sum(s.value for s in m["sluice_requests_total"]) == 1


def test_plans_and_rate_limits_are_counted(own_gateway, backends, helpers):
    key = "sk-test-observe-plan-0123456789"
    snap = helpers.make_snapshot(1, {"chat-demo": (5000, [backends["openai-a"].entry(1)])})
    # 0.01/s: no token comes back during the test, so the counts are exact
    helpers.add_planned(snap, key, {"rate_per_second": 0.01, "burst": 2}, plan_name="gold")
    assert own_gateway.push(snap).status_code == 200
    statuses = [helpers.chat(own_gateway, key=key).status_code for _ in range(4)]
    assert statuses == [200, 200, 429, 429]
    m = scrape(own_gateway)
    assert value(m, "sluice_rate_limited_total", model="chat-demo", plan="gold",
                 limit="rate") == 2
    assert value(m, "sluice_requests_total", model="chat-demo", status="429",
                 plan="gold") == 2
    assert value(m, "sluice_requests_total", model="chat-demo", status="200",
                 plan="gold") == 2


PII_TEXT = ("mail ann.lee@example.com or call +1 415-555-0134 / 13812345678, "
            "card 4111 1111 1111 1111, id 11010519491231002X, ssn 078-05-1120 — 你好")


def test_body_excerpts_are_off_by_default(served, helpers):
    assert helpers.chat(served, messages=[{"role": "user", "content": PII_TEXT}],
                        headers={"X-Request-Id": "req-no-excerpt"}).status_code == 200
    (line,) = [x for x in access_lines(served, 1) if x["request_id"] == "req-no-excerpt"]
    assert line["excerpt"] == ""


def test_body_excerpts_when_enabled_are_pii_masked(gateway_factory, default_snapshot,
                                                  helpers):
    gw = gateway_factory(log_excerpts=400)
    assert gw.push(default_snapshot).status_code == 200
    body = json.dumps({"model": "chat-demo", "messages": [
        {"role": "user", "content": PII_TEXT}]}, ensure_ascii=False).encode()  # raw UTF-8
    r = requests.post(gw.url + "/v1/chat/completions", data=body, timeout=10,
                      headers={"Authorization": f"Bearer {helpers.KEY}",
                               "Content-Type": "application/json",
                               "X-Request-Id": "req-excerpt"})
    assert r.status_code == 200, r.text

    (line,) = [x for x in access_lines(gw, 1) if x["request_id"] == "req-excerpt"]
    excerpt = line["excerpt"]
    assert excerpt.startswith('{"')   # the start of the caller's body ...
    for secret in ("ann.lee@example.com", "415-555-0134", "13812345678",
                   "4111 1111 1111 1111", "11010519491231002X", "078-05-1120"):
        assert secret not in excerpt, (secret, excerpt)
    for placeholder in ("<email>", "<phone>", "<card>", "<national_id>"):
        assert placeholder in excerpt, (placeholder, excerpt)
    assert "你好" in excerpt           # ... with the harmless text kept
    log = (gw.prefix / "logs" / "access.log").read_text()
    assert "4111 1111 1111 1111" not in log and helpers.KEY not in log
