"""One error format: a backend's own error answer reaches the caller in the error
template, with the request id, its status and message kept (and, for an OpenAI
caller of an OpenAI backend, OpenAI's type and param, so the official client raises
the right exception); the backend's raw body is kept in the access log, for its 5xx
answers too (nginx intercepts none of them)."""
from __future__ import annotations

import openai
import pytest
import requests

from gateway_readings import access_lines
from waiting import eventually


def logged(gw, rid):
    """The access log line of request `rid`, once it is flushed."""
    return eventually(lambda: [l for l in access_lines(gw, 1, timeout=0.5)
                               if l["request_id"] == rid], 10)[0]


@pytest.mark.parametrize("injected, openai_type", [
    (400, "invalid_request_error"),
    (401, "authentication_error"),
    (404, "not_found_error"),
    (422, "server_error"),
    (429, "rate_limit_error"),
])
def test_openai_backend_error_in_template(served, helpers, injected, openai_type):
    r = helpers.chat(served, headers={"X-Demo-Status": str(injected)})
    err = helpers.assert_error(r, injected, openai_type)
    assert f"injected status {injected}" in err["message"]
    assert "param" in err and err["param"] is None


def test_backend_error_body_kept_in_log(served, helpers):
    r = helpers.chat(served, headers={"X-Demo-Status": "400"})
    rid = r.headers["X-Request-Id"]
    logged(served, rid)   # flushed
    [line] = [l for l in access_lines(served, 1) if l["request_id"] == rid]
    assert line["status"] == "400"
    assert line["error_type"] == "invalid_request_error"
    # the backend's own body, raw
    assert '"injected status 400"' in line["upstream_error"]
    assert '"type": "invalid_request_error"' in line["upstream_error"]


def test_predict_backend_error_in_template(served, helpers):
    r = requests.post(served.url + "/v1/models/predict-demo/predict",
                      headers={"Authorization": f"Bearer {helpers.KEY}",
                               "X-Demo-Status": "404"},
                      json={"instances": [1]}, timeout=10)
    err = helpers.assert_error(r, 404, "not_found")
    assert "injected status 404" in err["message"]
    assert "param" not in err     # OpenAI's fields only for OpenAI callers


@pytest.mark.parametrize("injected, exc", [
    (400, openai.BadRequestError),
    (401, openai.AuthenticationError),
    (404, openai.NotFoundError),
    (429, openai.RateLimitError),
    (500, openai.InternalServerError),
])
def test_openai_client_raises_the_right_class(served, helpers, injected, exc):
    client = openai.OpenAI(base_url=served.url + "/v1", api_key=helpers.KEY, max_retries=0,
                           timeout=10, default_headers={"X-Demo-Status": str(injected)})
    with pytest.raises(exc) as info:
        client.chat.completions.create(model="chat-demo",
                                       messages=[{"role": "user", "content": "hi"}])
    e = info.value
    assert e.status_code == injected if injected < 500 else 502
    assert e.body["request_id"] == e.response.headers["X-Request-Id"]
    assert e.body["code"] == e.status_code


@pytest.mark.parametrize("injected, status, err_type", [
    (500, 502, "server_error"),
    (502, 502, "server_error"),
    (503, 503, "server_error"),
    (504, 504, "server_error"),
])
def test_backend_5xx_in_template_with_its_body_in_the_log(served, helpers, injected, status,
                                                          err_type):
    rid = f"five-{injected}"
    r = helpers.chat(served, headers={"X-Demo-Status": str(injected), "X-Request-Id": rid})
    err = helpers.assert_error(r, status, err_type)
    # the backend's own message, and its status, reach the caller
    assert f"injected status {injected}" in err["message"]
    assert f"({injected})" in err["message"]
    line = logged(served, rid)
    assert line["status"] == str(status) and line["error_type"] == err_type
    assert line["backend"] == "openai-a"
    # the backend's raw body, not the template's
    assert f'"injected status {injected}"' in line["upstream_error"]
    assert '"request_id"' not in line["upstream_error"]


def test_predict_backend_503_keeps_its_message_and_body(served, helpers):
    r = requests.post(served.url + "/v1/models/predict-demo/predict",
                      headers={"Authorization": f"Bearer {helpers.KEY}",
                               "X-Demo-Status": "503", "X-Request-Id": "five-predict"},
                      json={"instances": [1]}, timeout=10)
    err = helpers.assert_error(r, 503, "backend_unavailable")
    assert "injected status 503" in err["message"]
    assert "injected status 503" in logged(served, "five-predict")["upstream_error"]


def test_connect_failure_is_still_nginx_502_in_template(gateway, helpers, dead_port):
    b = {"id": 9, "name": "nobody", "protocol": "openai", "scheme": "http",
         "host": "127.0.0.1", "port": dead_port, "host_header": f"localhost:{dead_port}",
         "base_path": "", "weight": 1}
    assert gateway.push(helpers.make_snapshot(1, {"chat-demo": (5000, [b])})).status_code == 200
    r = helpers.chat(gateway, headers={"X-Request-Id": "five-refused"})
    helpers.assert_error(r, 502, "backend_error")
    assert logged(gateway, "five-refused")["upstream_error"] == ""
