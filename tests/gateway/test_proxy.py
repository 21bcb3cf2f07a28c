"""What a caller of the public listener sees: requests reach the right backend and
come back unchanged; every refusal is the error template with the request id."""
from __future__ import annotations

import json
import re

import requests


def test_chat_request_reaches_backend(served, helpers):
    r = helpers.chat(served)
    assert r.status_code == 200, r.text
    assert r.headers["X-Demo-Backend"] == "openai-a"
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "echo: hello there"
    assert body["model"] == "chat-demo"


def test_predict_request_reaches_backend(served, helpers):
    r = requests.post(served.url + "/v1/models/predict-demo/predict?explain=1",
                      json={"instances": ["a", "bb"]},
                      headers={"X-API-Key": helpers.KEY}, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["X-Demo-Backend"] == "predict-a"
    body = r.json()
    assert body["model"] == "predict-demo"
    assert [p["length"] for p in body["predictions"]] == [1, 2]


def test_sse_stream_passes_through(served, helpers):
    r = helpers.chat(served, stream=True)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/event-stream")
    events = [line[len("data: "):] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    words = "".join(json.loads(e)["choices"][0]["delta"].get("content", "")
                    for e in events[:-1])
    assert words == "echo: hello there"


def test_request_id_generated_when_missing(served, helpers):
    r = helpers.chat(served)
    rid = r.headers["X-Request-Id"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid)
    assert r.headers["X-Demo-Request-Id"] == rid      # forwarded to the backend
    assert helpers.chat(served).headers["X-Request-Id"] != rid


def test_valid_request_id_kept_and_forwarded(served, helpers):
    r = helpers.chat(served, headers={"X-Request-Id": "trace-1.2:abc_DEF-9"})
    assert r.headers["X-Request-Id"] == "trace-1.2:abc_DEF-9"
    assert r.headers["X-Demo-Request-Id"] == "trace-1.2:abc_DEF-9"


def test_invalid_request_id_replaced(served, helpers):
    for bad in ("has space", "x" * 129, "semi;colon"):
        r = helpers.chat(served, headers={"X-Request-Id": bad})
        assert r.status_code == 200
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["X-Request-Id"])
        assert r.headers["X-Demo-Request-Id"] == r.headers["X-Request-Id"]


def test_request_id_kept_on_errors(served, helpers):
    r = helpers.chat(served, key=None, headers={"X-Request-Id": "err-123"})
    err = helpers.assert_error(r, 401, "unauthorized")
    assert err["request_id"] == "err-123"


def test_caller_credentials_never_reach_backend(served, helpers):
    r = helpers.chat(served)                                   # Authorization: Bearer
    assert r.status_code == 200
    assert r.headers["X-Demo-Saw-Authorization"] == "no"
    r = helpers.chat(served, key=None, headers={"X-API-Key": helpers.KEY})
    assert r.status_code == 200
    assert r.headers["X-Demo-Saw-Authorization"] == "no"
    # both at once: the gateway authenticates with one and forwards neither
    r = helpers.chat(served, headers={"X-API-Key": helpers.KEY})
    assert r.status_code == 200
    assert r.headers["X-Demo-Saw-Authorization"] == "no"


def test_credentials_and_request_id_found_among_many_headers(served, helpers):
    # access walks the header list once (lua/sluice/headers.lua): the key after a
    # hundred other headers, names in any case, an empty header taken as absent
    few = {f"X-Filler-{i}": "v" for i in range(90)}
    r = helpers.chat(served, key=None, headers={**few, "AUTHORIZATION": f"Bearer {helpers.KEY}",
                                                "x-REQUEST-id": "late-id-1"})
    assert r.status_code == 200, r.text
    assert r.headers["X-Request-Id"] == "late-id-1"
    # past a hundred (ngx.req.get_headers' default limit) the gateway still finds them
    # and forwards the request; the demo backend, a Python http.server, may refuse
    # that many headers itself (431, in the template), which is past authentication
    many = {f"X-Filler-{i}": "v" for i in range(120)}
    r = helpers.chat(served, key=None, headers={**many, "AUTHORIZATION": f"Bearer {helpers.KEY}",
                                                "x-REQUEST-id": "late-id-2"})
    assert r.headers["X-Request-Id"] == "late-id-2"
    if r.status_code != 200:
        err = helpers.assert_error(r, 431, "invalid_request")
        assert err["message"] == "the backend refused the request (431)"
    r = helpers.chat(served, key=None, headers={"Authorization": "", "X-Request-Id": "",
                                                "X-API-Key": helpers.KEY})
    assert r.status_code == 200, r.text
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["X-Request-Id"])
    helpers.assert_error(helpers.chat(served, key=None, headers={"Authorization": ""}),
                         401, "unauthorized")


def test_missing_key_is_401(served, helpers):
    helpers.assert_error(helpers.chat(served, key=None), 401, "unauthorized")
    r = helpers.chat(served, key=None, headers={"Authorization": "Basic Zm9vOmJhcg=="})
    helpers.assert_error(r, 401, "unauthorized")


def test_wrong_key_is_403(served, helpers):
    helpers.assert_error(helpers.chat(served, key="sk-nope"), 403, "forbidden")
    r = helpers.chat(served, key=None, headers={"X-API-Key": "sk-nope"})
    helpers.assert_error(r, 403, "forbidden")


def test_expired_key_is_403(served, helpers):
    err = helpers.assert_error(helpers.chat(served, key=helpers.KEY_EXPIRED), 403, "forbidden")
    assert "expired" in err["message"]


def test_model_not_allowed_is_403(served, helpers):
    assert helpers.chat(served, key=helpers.KEY_LIMITED).status_code == 200
    r = requests.post(served.url + "/v1/models/predict-demo/predict", json={"input": 1},
                      headers={"Authorization": f"Bearer {helpers.KEY_LIMITED}"}, timeout=10)
    err = helpers.assert_error(r, 403, "forbidden")
    assert "predict-demo" in err["message"]


def test_unknown_model_is_404(served, helpers):
    err = helpers.assert_error(helpers.chat(served, model="no-such-model"), 404, "not_found")
    assert "no-such-model" in err["message"]
    r = requests.post(served.url + "/v1/models/nope/predict", json={"input": 1},
                      headers={"X-API-Key": helpers.KEY}, timeout=10)
    helpers.assert_error(r, 404, "not_found")


def test_unknown_path_is_404(served, helpers):
    for path in ("/", "/v1/complete", "/v1/models/x/predict/extra", "/v2/models/x/infer/x"):
        r = requests.post(served.url + path, json={}, headers={"X-API-Key": helpers.KEY},
                          timeout=10)
        helpers.assert_error(r, 404, "not_found")


def test_wrong_method_is_405(served, helpers):
    r = requests.get(served.url + "/v1/chat/completions", headers={"X-API-Key": helpers.KEY},
                     timeout=10)
    helpers.assert_error(r, 405, "method_not_allowed")
    assert r.headers["Allow"] == "POST"


def _post_raw(gw, helpers, data: bytes, path="/v1/chat/completions"):
    return requests.post(gw.url + path, data=data, timeout=10,
                         headers={"X-API-Key": helpers.KEY, "Content-Type": "application/json"})


def test_malformed_json_is_400(served, helpers):
    for data in (b'{"model": "chat-demo", ', b"", b"[1, 2]", b'"chat-demo"'):
        helpers.assert_error(_post_raw(served, helpers, data), 400, "invalid_request")
    helpers.assert_error(_post_raw(served, helpers, b"[]", "/v1/models/predict-demo/predict"),
                         400, "invalid_request")


def test_invalid_utf8_is_400(served, helpers):
    data = b'{"model": "chat-demo", "messages": [{"role": "user", "content": "\xff\xfe"}]}'
    err = helpers.assert_error(_post_raw(served, helpers, data), 400, "invalid_request")
    assert "UTF-8" in err["message"]


def test_model_field_required(served, helpers):
    for model in ("", 42, None):
        data = json.dumps({"model": model, "messages": []}).encode()
        err = helpers.assert_error(_post_raw(served, helpers, data), 400, "invalid_request")
        assert "model" in err["message"]


def test_impossible_protocol_pair_is_400(served, helpers):
    # a predict-only model cannot compute embeddings
    r = requests.post(served.url + "/v1/embeddings", json={"model": "predict-demo",
                                                           "input": "x"},
                      headers={"X-API-Key": helpers.KEY}, timeout=10)
    err = helpers.assert_error(r, 400, "invalid_request")
    assert "embeddings" in err["message"] and "predict" in err["message"]


def test_oversized_body_is_413(served, helpers):
    big = b'{"model": "chat-demo", "pad": "' + b"x" * (1024 * 1024 + 10) + b'"}'
    helpers.assert_error(_post_raw(served, helpers, big), 413, "payload_too_large")

    # chunked: no Content-Length up front, so nginx finds out while Lua reads the body
    def chunks():
        for _ in range(80):
            yield b"x" * 16384
    r = requests.post(served.url + "/v1/chat/completions", data=chunks(), timeout=10,
                      headers={"X-API-Key": helpers.KEY})
    helpers.assert_error(r, 413, "payload_too_large")


def test_no_snapshot_is_503(gateway_factory, helpers):
    # a gateway of its own: the module's shared one serves an earlier test's snapshot
    helpers.assert_error(helpers.chat(gateway_factory()), 503, "backend_unavailable")
