"""Requests whose path names the model (issue 13): forwarded as they came when no step
reads the decoded body, decoded when one does; what a malformed body gets either way.

The proof that no decode happened is a body every JSON parser a backend uses accepts
but the gateway's cjson refuses: a string holding a lone UTF-16 surrogate escape
("\\ud83d", what JavaScript's JSON.stringify writes for a string cut in the middle of
an emoji). Decoded, it is a 400; forwarded as it came, the backend answers it.
"""
from __future__ import annotations

import pytest
import requests

TENSOR = '[{"name": "x", "shape": [2], "datatype": "FP64", "data": [1.5, 2]}]'
# valid JSON (RFC 8259 allows any \\u escape), refused by cjson
CUT_EMOJI = ('{"id": "req-7", "parameters": {"note": "fin \\ud83d"}, "inputs": '
             + TENSOR + '}').encode()
PLAIN = ('{"id": "req-7", "inputs": ' + TENSOR + '}').encode()


@pytest.fixture
def path_gw(gateway, helpers, protocol_backends):
    """`v2`: a kserve_v2 model called through /v2/models/v2/infer, nothing on it that
    reads the body; `v2-cached`: the same backend with a response cache; `tf`: a
    tfserving model, so a v2 caller's body is converted."""
    v2 = protocol_backends["kserve_v2"]
    snap = helpers.make_snapshot(1, {
        "v2": (5000, [v2.entry(1)]),
        "v2-cached": (5000, [v2.entry(2)]),
        "tf": (5000, [protocol_backends["tfserving"].entry(3)]),
    })
    snap["models"]["v2-cached"]["cache_ttl_s"] = 60
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    return gateway


def post(gw, helpers, model: str, data: bytes) -> requests.Response:
    return requests.post(gw.url + f"/v2/models/{model}/infer", data=data, timeout=10,
                         headers={"X-API-Key": helpers.KEY,
                                  "Content-Type": "application/json"})


def test_passthrough_is_served(path_gw, helpers):
    r = post(path_gw, helpers, "v2", PLAIN)
    assert r.status_code == 200, r.text
    assert r.headers["X-Demo-Backend"] == "kserve_v2"
    doc = r.json()
    assert doc["model_name"] == "v2" and doc["id"] == "req-7"
    assert doc["outputs"] == [{"name": "sum", "datatype": "FP64", "shape": [2],
                               "data": [1.5, 2]}]


def test_passthrough_body_is_not_decoded(path_gw, helpers):
    # forwarded as it came: the backend takes it
    r = post(path_gw, helpers, "v2", CUT_EMOJI)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [1.5, 2]
    # where a step reads the body (the cache key, a conversion), cjson refuses it
    for model in ("v2-cached", "tf"):
        err = helpers.assert_error(post(path_gw, helpers, model, CUT_EMOJI), 400,
                                   "invalid_request")
        assert "not valid JSON" in err["message"], err
        assert post(path_gw, helpers, model, PLAIN).status_code == 200


def test_malformed_passthrough_body_is_400(path_gw, helpers):
    # refused by the gateway, undecoded: not an object, truncated, invalid UTF-8
    for data in (b"[]", b'"v2"', b'{"inputs": [', b'{"id": 1} {"id": 2}', b""):
        helpers.assert_error(post(path_gw, helpers, "v2", data), 400, "invalid_request")
    err = helpers.assert_error(post(path_gw, helpers, "v2", b'{"id": "\xff"}'), 400,
                               "invalid_request")
    assert "UTF-8" in err["message"]
    # shaped like an object but not JSON: the backend's own 400, in the template
    err = helpers.assert_error(post(path_gw, helpers, "v2", b'{"inputs": [1 2]}'), 400,
                               "invalid_request")
    assert err["message"].startswith("the backend refused the request (400)"), err
