"""A backend 200 whose body cannot be converted reaches the caller as a real 502 in
the error template (convert.lua's old FIXME), through the subrequest that reads a
converted answer whole (lua/sluice/relay.lua); a good answer keeps its status and
headers, and the log line still has its backend and upstream time."""
from __future__ import annotations

import json
from contextlib import contextmanager

import openai
import pytest
import requests

from backend_http import Backend, entry, served
from gateway_readings import access_lines
from waiting import eventually


class _Predict(Backend):
    """A KServe v1 backend whose answer the test chooses (X-Answer: good | junk |
    empty | html | 404)."""

    def do_POST(self):
        body = json.loads(self.read_body())
        kind = self.headers.get("X-Answer", "good")
        status, ctype = 200, "application/json"
        if kind == "good":
            out = json.dumps({"predictions": [f"seen {len(body['instances'])}"]}).encode()
        elif kind == "junk":
            out = b'{"unexpected": true}'
        elif kind == "empty":
            out = b'{"predictions": []}'
        elif kind == "html":
            out, ctype = b"<html>oops</html>", "text/html"
        elif kind in ("500", "503", "504"):
            status, out = int(kind), b'{"error": "backend broke"}'
        else:
            status, out = 404, b'{"error": "no such model here"}'
        self.answer(status, out, ctype, {"X-Backend-Note": kind, "X-Backend-Path": self.path})


@contextmanager
def backend(handler, name="kv1", protocol="predict"):
    """A test backend (`handler`) on a free port, served in a thread while the block
    runs; yields its snapshot entry (id 1)."""
    with served(handler) as port:
        yield entry(1, name, protocol, port)


@pytest.fixture
def converting(gateway, helpers):
    with backend(_Predict) as b:
        r = gateway.push(helpers.make_snapshot(1, {"conv": (5000, [b])}))
        assert r.status_code == 200, r.text
        yield gateway


def chat(gw, helpers, answer, stream=False, rid=None):
    headers = {"Authorization": f"Bearer {helpers.KEY}", "X-Answer": answer}
    if rid:
        headers["X-Request-Id"] = rid
    return requests.post(gw.url + "/v1/chat/completions", headers=headers, timeout=10,
                         json={"model": "conv", "stream": stream,
                               "messages": [{"role": "user", "content": "hi"}]})


def test_good_answer_is_converted_with_its_status_and_headers(converting, helpers):
    r = chat(converting, helpers, "good", rid="conv-good")
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "seen 1"
    assert r.headers["X-Backend-Note"] == "good"
    assert r.headers["X-Request-Id"] == "conv-good"
    line = eventually(lambda: [l for l in access_lines(converting, 1, timeout=0.5)
                               if l["request_id"] == "conv-good"], 10)[0]
    assert line["status"] == "200" and line["backend"] == "kv1"
    assert line["upstream_ms"] != ""          # the subrequest's upstream time is logged


def test_the_query_string_reaches_the_backend_through_the_subrequest(converting, helpers):
    # proxy_pass appends $is_args$args; the subrequest gets the caller's args
    r = requests.post(converting.url + "/v1/chat/completions?trace=1&x=%20y", timeout=10,
                      headers={"Authorization": f"Bearer {helpers.KEY}"},
                      json={"model": "conv", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    assert r.headers["X-Backend-Path"] == "/v1/models/conv/predict?trace=1&x=%20y"
    r = chat(converting, helpers, "good")
    assert r.headers["X-Backend-Path"] == "/v1/models/conv/predict"


@pytest.mark.parametrize("answer, reason", [
    ("junk", "predictions"),
    ("empty", "predictions"),
    ("html", "not a JSON object"),
])
def test_unconvertible_200_is_a_real_502(converting, helpers, answer, reason):
    r = chat(converting, helpers, answer, rid=f"conv-{answer}")
    err = helpers.assert_error(r, 502, "backend_error")
    assert "cannot convert the backend answer" in err["message"]
    assert reason in err["message"]
    line = eventually(lambda: [l for l in access_lines(converting, 1, timeout=0.5)
                               if l["request_id"] == f"conv-{answer}"], 10)[0]
    assert line["status"] == "502" and line["error_type"] == "backend_error"


def test_unconvertible_answer_to_a_stream_is_a_real_502(converting, helpers):
    r = chat(converting, helpers, "junk", stream=True)
    helpers.assert_error(r, 502, "backend_error")


def test_backend_error_through_the_subrequest_is_the_template(converting, helpers):
    r = chat(converting, helpers, "404")
    err = helpers.assert_error(r, 502, "backend_error")   # a converted pair's other 4xx
    assert "no such model here" in err["message"]


@pytest.mark.parametrize("answer, status, err_type", [
    ("500", 502, "backend_error"),
    ("503", 503, "backend_unavailable"),
    ("504", 504, "backend_timeout"),
])
def test_backend_5xx_through_the_subrequest_is_the_template_with_its_body_logged(
        converting, helpers, answer, status, err_type):
    r = chat(converting, helpers, answer, rid=f"conv-{answer}")
    err = helpers.assert_error(r, status, err_type)
    assert f"the backend failed ({answer}): backend broke" in err["message"]
    line = eventually(lambda: [l for l in access_lines(converting, 1, timeout=0.5)
                               if l["request_id"] == f"conv-{answer}"], 10)[0]
    assert line["backend"] == "kv1" and line["upstream_ms"] != ""
    assert line["status"] == str(status) and line["error_type"] == err_type
    assert line["upstream_error"] == '{"error": "backend broke"}'


def test_backend_504_of_a_relayed_answer_goes_to_the_fallback(gateway, helpers, backends):
    with backend(_Predict) as b:
        snap = helpers.make_snapshot(1, {"conv": (5000, [b]),
                                         "fast": (5000, [backends["openai-a"].entry(2)])})
        snap["models"]["conv"]["fallback_model"] = "fast"
        assert gateway.push(snap).status_code == 200
        r = chat(gateway, helpers, "504", rid="conv-fb")
        assert r.status_code == 200, r.text
        assert r.headers["X-Sluice-Fallback"] == "fast"
        assert r.json()["choices"][0]["message"]["content"] == "echo: hi"
        line = eventually(lambda: [l for l in access_lines(gateway, 1, timeout=0.5)
                                   if l["request_id"] == "conv-fb"], 10)[0]
        assert line["status"] == "200" and line["fallback"] == "fast"
        assert line["error_type"] == ""
        # what the first backend said is kept
        assert line["upstream_error"] == '{"error": "backend broke"}'


def test_openai_client_sees_a_server_error(converting, helpers):
    client = openai.OpenAI(base_url=converting.url + "/v1", api_key=helpers.KEY,
                           max_retries=0, timeout=10, default_headers={"X-Answer": "junk"})
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="conv",
                                       messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 502


@pytest.fixture
def falling_back(gateway_factory, helpers, backends):
    """On a gateway of its own (its test reads the access log and the stats whole):
    `direct` (OpenAI to openai-a, proxied as it comes) and `relayed` (OpenAI to
    predict-a, converted whole) time out on a slow answer and fall back to `conv`
    (the test's KServe v1 backend, converted whole)."""
    with backend(_Predict) as b:
        snap = helpers.make_snapshot(1, {"conv": (5000, [b]),
                                         "direct": (300, [backends["openai-a"].entry(2)]),
                                         "relayed": (300, [backends["predict-a"].entry(3)])})
        snap["models"]["direct"]["fallback_model"] = "conv"
        snap["models"]["relayed"]["fallback_model"] = "conv"
        gateway = gateway_factory()
        assert gateway.push(snap).status_code == 200
        yield gateway


def slow_chat(gw, helpers, model, answer, rid):
    return requests.post(gw.url + "/v1/chat/completions", timeout=10,
                         headers={"Authorization": f"Bearer {helpers.KEY}",
                                  "X-Answer": answer, "X-Request-Id": rid,
                                  "X-Demo-Latency-Ms": "1500"},
                         json={"model": model, "messages": [{"role": "user", "content": "hi"}]})


@pytest.mark.parametrize("first, first_id", [("direct", "2"), ("relayed", "3")])
def test_unconvertible_200_of_a_fallback_is_a_real_502(falling_back, helpers, first,
                                                       first_id):
    gw = falling_back
    r = slow_chat(gw, helpers, first, "junk", f"fb-junk-{first}")
    err = helpers.assert_error(r, 502, "backend_error")
    assert "cannot convert the backend answer" in err["message"]
    assert r.headers["X-Sluice-Fallback"] == "conv"

    r = slow_chat(gw, helpers, first, "good", f"fb-good-{first}")
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "seen 1"
    assert r.headers["X-Sluice-Fallback"] == "conv"

    # both passes' attempts, in order, reach the log and the stats
    # (the log is flushed each second: wait for both requests' lines, not the first's)
    lines = eventually(lambda: (ls := [l for l in access_lines(gw, 2, timeout=0.5)
                                       if l["request_id"].startswith("fb-")])
                       and len(ls) >= 2 and ls, 10)
    assert {l["status"] for l in lines} == {"502", "200"}
    assert all(l["fallback"] == "conv" and l["backend"] == "kv1" for l in lines)
    # the first pass's attempt (timed out after 300 ms) is counted with the fallback's
    assert all(float(l["upstream_ms"]) >= 290 for l in lines)
    stats = eventually(lambda: (s := gw.stats()["backends"])[first_id]["failures"] == 2
                       and s, 10)
    assert stats["1"]["successes"] == 2 and stats["1"]["failures"] == 0


class _Openai504(Backend):
    """An OpenAI backend that answers every chat with its own 504 and a JSON body."""

    def do_POST(self):
        self.read_body()
        self.answer(504, b'{"error": {"message": "upstream model timed out", "type": "timeout"}}')


def test_backend_504_of_an_unchanged_answer_goes_to_the_fallback(gateway, helpers, backends):
    """OpenAI caller, OpenAI backend (nothing converted): the backend's own 504 still
    falls back, as nginx's own timeout does; a stream of the same model is not held."""
    with backend(_Openai504, "slow-openai", "openai") as b:
        snap = helpers.make_snapshot(1, {"prim": (5000, [b]),
                                         "fast": (5000, [backends["openai-a"].entry(2)])})
        snap["models"]["prim"]["fallback_model"] = "fast"
        assert gateway.push(snap).status_code == 200
        r = requests.post(gateway.url + "/v1/chat/completions", timeout=15,
                          headers={"Authorization": f"Bearer {helpers.KEY}",
                                   "X-Request-Id": "plain-fb"},
                          json={"model": "prim", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        assert r.headers["X-Sluice-Fallback"] == "fast"
        assert r.json()["choices"][0]["message"]["content"] == "echo: hi"
        line = eventually(lambda: [l for l in access_lines(gateway, 1, timeout=0.5)
                                   if l["request_id"] == "plain-fb"], 10)[0]
        assert line["status"] == "200" and line["fallback"] == "fast"
        assert "upstream model timed out" in line["upstream_error"]
        # a stream is not relayed: the backend's 504 reaches the caller in the template
        r = requests.post(gateway.url + "/v1/chat/completions", timeout=15,
                          headers={"Authorization": f"Bearer {helpers.KEY}"},
                          json={"model": "prim", "stream": True,
                                "messages": [{"role": "user", "content": "hi"}]})
        err = helpers.assert_error(r, 504, "timeout")   # the backend's own type
        assert "upstream model timed out" in err["message"]
        assert "X-Sluice-Fallback" not in r.headers
