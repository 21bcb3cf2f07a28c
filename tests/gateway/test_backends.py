"""Backend failures as the caller sees them, retries, and the static-weight split."""
from __future__ import annotations

import http.client
from collections import Counter
from urllib.parse import urlsplit

import pytest
import requests

from backend_http import Backend, entry, served


def _serve(gateway, helpers, models):
    r = gateway.push(helpers.make_snapshot(1, models))
    assert r.status_code == 200, r.text
    return gateway


def test_backend_down_is_502(gateway, helpers, backends, dead_port):
    down = backends["openai-a"].entry(1, port=dead_port)
    _serve(gateway, helpers, {"chat-demo": (2000, [down])})
    helpers.assert_error(helpers.chat(gateway), 502, "backend_error")


def test_all_backends_drained_is_503(gateway, helpers, backends):
    drained = [backends["openai-a"].entry(1, weight=0), backends["openai-b"].entry(2, weight=0)]
    _serve(gateway, helpers, {"chat-demo": (2000, drained)})
    helpers.assert_error(helpers.chat(gateway), 503, "backend_unavailable")


def test_slow_backend_is_504(gateway, helpers, backends):
    _serve(gateway, helpers, {"chat-demo": (300, [backends["openai-a"].entry(1)])})
    r = helpers.chat(gateway, headers={"X-Demo-Latency-Ms": "1500"})
    helpers.assert_error(r, 504, "backend_timeout")
    # within the model's timeout it still answers
    assert helpers.chat(gateway, headers={"X-Demo-Latency-Ms": "50"}).status_code == 200


@pytest.mark.parametrize("backend_status, status, verb", [
    (500, 502, "failed"),
    (502, 502, "failed"),
    (503, 503, "failed"),
    (504, 504, "failed"),
    (413, 413, "refused the request"),
])
def test_backend_5xx_becomes_template(served, helpers, backend_status, status, verb):
    r = helpers.chat(served, headers={"X-Demo-Status": str(backend_status)})
    # the template, the backend's status and message in it; an OpenAI backend's own
    # type for an OpenAI caller (the demo's: server_error); its raw body only in the log
    err = helpers.assert_error(r, status, "server_error")
    assert err["message"] == f"the backend {verb} ({backend_status}): " \
                             f"injected status {backend_status}"
    assert '"param": null' not in r.text


def test_backend_5xx_of_a_predict_backend_gets_the_gateways_types(served, helpers):
    for backend_status, status, err_type in ((500, 502, "backend_error"),
                                             (503, 503, "backend_unavailable"),
                                             (504, 504, "backend_timeout")):
        r = requests.post(served.url + "/v1/models/predict-demo/predict",
                          headers={"Authorization": f"Bearer {helpers.KEY}",
                                   "X-Demo-Status": str(backend_status)},
                          json={"instances": [1]}, timeout=10)
        err = helpers.assert_error(r, status, err_type)
        assert f"injected status {backend_status}" in err["message"]


def test_backend_4xx_keeps_its_meaning_in_the_template(served, helpers):
    r = helpers.chat(served, headers={"X-Demo-Status": "429"})
    # status, message and OpenAI's type kept; in the template, with the request id
    err = helpers.assert_error(r, 429, "rate_limit_error")
    assert "injected status 429" in err["message"]


def test_connect_failure_retries_another_backend(gateway, helpers, backends, dead_port):
    pool = [backends["openai-a"].entry(1, port=dead_port, weight=100),
            backends["openai-b"].entry(2, weight=100)]
    _serve(gateway, helpers, {"chat-demo": (2000, pool)})
    for _ in range(10):
        r = helpers.chat(gateway)
        assert r.status_code == 200, r.text
        assert r.headers["X-Demo-Backend"] == "openai-b"


def test_base_path_reaches_backend(gateway, helpers, backends):
    # A base path the demo backend does not serve: its 404 proves the URI it saw.
    b = backends["predict-a"].entry(1, base_path="/prefix")
    _serve(gateway, helpers, {"p": (2000, [b])})
    r = requests.post(gateway.url + "/v1/models/p/predict?x=1", json={"input": 1},
                      headers={"X-API-Key": helpers.KEY}, timeout=10)
    assert r.status_code == 404
    assert "/prefix/v1/models/p/predict" in r.json()["error"]["message"]


def test_weighted_split_follows_static_weights(gateway, helpers, backends):
    pool = [backends["openai-a"].entry(1, weight=100),
            backends["openai-b"].entry(2, weight=300),
            backends["openai-a"].entry(3, port=1, weight=0)]     # drained: never chosen
    _serve(gateway, helpers, {"chat-demo": (2000, pool)})
    n = 300
    seen = Counter(helpers.chat(gateway).headers["X-Demo-Backend"] for _ in range(n))
    assert set(seen) == {"openai-a", "openai-b"}
    share_b = seen["openai-b"] / n
    # Smooth weighted round-robin is exact per worker (0.75); with 2 workers and
    # arbitrary connection spread allow +-0.1.
    assert 0.65 <= share_b <= 0.85, seen


class _Capture(Backend):
    """A throwaway backend that answers 200 and records what it was sent."""

    seen: list = []

    def do_POST(self):
        body = self.read_body()
        type(self).seen.append((self.path, dict(self.headers), body))
        self.answer(200, b'{"ok": true}')


@pytest.fixture
def capture():
    _Capture.seen = []
    with served(_Capture) as port:
        yield port


def test_what_the_backend_receives(gateway, helpers, capture):
    b = entry(1, "cap", "predict", capture, host_header="model.internal:8000",
              base_path="/serve")
    _serve(gateway, helpers, {"p": (2000, [b])})
    body = b'{"input": "caf\xc3\xa9"}'
    r = requests.post(gateway.url + "/v1/models/p/predict?trace=1&x=%20y", data=body,
                      headers={"Authorization": f"Bearer {helpers.KEY}",
                               "X-API-Key": helpers.KEY, "X-Request-Id": "abc-1",
                               "Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 200, r.text
    path, headers, got = _Capture.seen[-1]
    assert path == "/serve/v1/models/p/predict?trace=1&x=%20y"
    assert headers["Host"] == "model.internal:8000"
    assert headers["X-Request-Id"] == "abc-1"
    assert "Authorization" not in headers and "X-API-Key" not in headers
    assert got == body                                    # body passed through unchanged


# location / proxies without a URI variable (nginx.conf.tmpl): a path the caller sent
# plainly goes on as it came; one nginx normalises ($uri) goes on normalised, as
# before; the query string goes with both. Sent by http.client: requests would
# normalise the path itself.
@pytest.mark.parametrize("sent, seen", [
    ("/v1/models/p/predict?a=1&b=%2F", "/v1/models/p/predict?a=1&b=%2F"),
    ("/v1//models/p/./predict?a=1", "/v1/models/p/predict?a=1"),
    ("/v1/models/x/../p/predict", "/v1/models/p/predict"),
])
def test_the_backend_gets_the_path_nginx_read(gateway, helpers, capture, sent, seen):
    _serve(gateway, helpers, {"p": (2000, [entry(1, "cap", "predict", capture)])})
    url = urlsplit(gateway.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.request("POST", sent, body=b'{"input": 1}',
                     headers={"X-API-Key": helpers.KEY, "Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
    finally:
        conn.close()
    assert _Capture.seen[-1][0] == seen
