"""The JS SDK as brief 001 uses it: inside a browser's Web Worker (a real headless
Chromium, browser_worker.py) against a real gateway, the demo backend and the
tool-calling backend of tool_backend.py."""
from __future__ import annotations

import pytest
import requests
from backend_http import entry
from backend_http import served as serve_http
from browser_worker import chromium, origin_of, page_server, run_checks
from tool_backend import ToolModel


@pytest.fixture(scope="module")
def worker_page():
    with serve_http(ToolModel) as tool_port, page_server() as page, chromium() as driver:
        yield driver, page, tool_port


@pytest.fixture(scope="module")
def gateway(shared_gateways, worker_page):
    """The module's gateway, which lets the page's origin in (CORS), as an operator
    lets in the origin of a web app that calls Sluice from the browser."""
    return shared_gateways(cors_origins=(origin_of(worker_page[1]),))


def test_cors_lets_in_the_pages_origin_only(gateway, helpers, backends, worker_page):
    origin = origin_of(worker_page[1])
    assert gateway.push(helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)])})).status_code == 200
    url = gateway.url + "/v1/chat/completions"
    ask = {"Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization,content-type"}
    pre = requests.options(url, headers={"Origin": origin, **ask}, timeout=5)
    assert pre.status_code == 204, pre.text   # no key asked of a preflight
    assert pre.headers["Access-Control-Allow-Origin"] == origin
    assert pre.headers["Access-Control-Allow-Headers"] == "authorization,content-type"
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    other = requests.options(url, headers={"Origin": "http://elsewhere.example", **ask},
                             timeout=5)
    assert "Access-Control-Allow-Origin" not in other.headers
    assert other.status_code != 204
    # an error in the template reaches the page too, with the headers it may read
    bad = requests.post(url, headers={"Origin": origin, "Authorization": "Bearer nope"},
                        json={"model": "chat-demo", "messages": []}, timeout=5)
    assert bad.status_code == 403, bad.text   # invalid API key
    assert bad.headers["Access-Control-Allow-Origin"] == origin
    assert "X-Request-Id" in bad.headers["Access-Control-Expose-Headers"]
    plain = requests.post(url, headers={"Authorization": f"Bearer {helpers.KEY}"},
                          json={"model": "chat-demo",
                                "messages": [{"role": "user", "content": "hi"}]}, timeout=5)
    assert plain.status_code == 200 and "Access-Control-Allow-Origin" not in plain.headers


def test_the_sdk_in_a_web_worker(gateway, helpers, backends, worker_page):
    driver, page, tool_port = worker_page
    r = gateway.push(helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "empty-demo": (5000, []),               # no backend: 503 backend_unavailable
        "tools-demo": (5000, [entry(2, "tools", "openai", tool_port)]),
    }))
    assert r.status_code == 200, r.text
    seen = run_checks(driver, page, gateway.url, helpers.KEY,
                      ["scope", "generate", "stream", "tools", "notFound", "retries"])
    assert seen["scope"] == {"global": "DedicatedWorkerGlobalScope", "window": "undefined",
                             "process": "undefined"}
    assert seen["generate"] == "echo: hi from a worker"
    assert len(seen["stream"]) > 1 and "".join(seen["stream"]) == "echo: one two three"
    # arguments streamed in pieces, put together in the worker
    assert seen["tools"]["chunks"] > 4
    assert seen["tools"]["calls"] == [
        {"id": "call_0", "name": "lookup", "arguments": {"query": "from the worker"}}]
    err = seen["notFound"]
    assert (err["error"], err["code"], err["type"]) == ("NotFoundError", 404, "not_found")
    assert err["requestId"] and "no-such-model" in err["message"]
    assert seen["retries"]["retried"] == [503, 503]
    assert seen["retries"]["err"]["error"] == "ServiceUnavailableError"
