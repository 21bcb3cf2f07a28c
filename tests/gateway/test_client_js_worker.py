"""The JS SDK as brief 001 uses it: inside a browser's Web Worker (a real headless
Chromium, browser_worker.py) against a real gateway, the demo backend and the
tool-calling backend of tool_backend.py."""
from __future__ import annotations

import pytest
from backend_http import entry
from backend_http import served as serve_http
from browser_worker import chromium, page_server, run_checks
from tool_backend import ToolModel


@pytest.fixture(scope="module")
def worker_page():
    with serve_http(ToolModel) as tool_port, page_server() as page, chromium() as driver:
        yield driver, page, tool_port


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
