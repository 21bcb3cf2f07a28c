"""The Python SDK (clients/python, `sluice_client`) against a real gateway and real
demo backends: what a user of the SDK sees, retries and errors included."""
from __future__ import annotations

import logging
import time

import pytest
import sluice_client
from sluice_client import (APIConnectionError, APITimeoutError, NotFoundError,
                           PermissionDeniedError, RateLimitError,
                           ServiceUnavailableError, Sluice)

from control_plane.demo.protocols import prediction

PLAN_KEY = "sk-test-sdk-planned-0123456789abcdef"   # consumer 3, on a tiny plan


def planned_snapshot(helpers, backends, plan: dict) -> dict:
    snap = helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "predict-demo": (5000, [backends["predict-a"].entry(2)]),
        "empty-demo": (5000, []),               # no backend: 503 backend_unavailable
    })
    return helpers.add_planned(snap, PLAN_KEY, plan, plan_name="tiny")


@pytest.fixture
def client(served, helpers):
    return Sluice(served.url, helpers.KEY)


def retries(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "sluice_client" and "retry" in r.getMessage()]


def test_model_generate_from_the_environment(served, helpers, monkeypatch):
    monkeypatch.setenv("SLUICE_BASE_URL", served.url)
    monkeypatch.setenv("SLUICE_API_KEY", helpers.KEY)
    assert sluice_client.Model("chat-demo").generate("hi") == "echo: hi"


def test_brief_001s_call_as_written(served, helpers, monkeypatch):
    monkeypatch.setenv("SLUICE_BASE_URL", served.url)
    monkeypatch.setenv("SLUICE_API_KEY", helpers.KEY)
    partial = []

    def handle_partial_result(piece):
        partial.append(piece)

    model = sluice_client.Model("chat-demo")
    text = model.generate(prompt="解释量子计算 的 基础", stream=True,
                          callback=handle_partial_result)
    assert text == "echo: 解释量子计算 的 基础"
    assert len(partial) > 1 and "".join(partial) == text
    assert model.generate(prompt="解释量子计算") == "echo: 解释量子计算"
    with pytest.raises(TypeError):
        model.generate("one", prompt="two")


def test_chat_and_params(client):
    answer = client.model("chat-demo").chat(
        [{"role": "system", "content": "be brief"},
         {"role": "user", "content": "hello there"}], max_tokens=20, temperature=0.5)
    assert answer["choices"][0]["message"]["content"] == "echo: hello there"
    assert answer["usage"]["completion_tokens"] == 3
    assert {"chat-demo", "predict-demo"} <= set(client.models())


def test_predict_one_input_and_a_list(client):
    model = client.model("predict-demo")
    assert model.predict("a cat") == prediction("a cat")
    assert model.predict(["a cat", [1, 2]]) == [prediction("a cat"), prediction([1, 2])]


def test_stream_as_an_iterator(client):
    pieces = client.model("chat-demo").generate("one two three", stream=True)
    pieces = list(pieces)
    assert len(pieces) > 1, pieces            # word by word, as the backend sent them
    assert "".join(pieces) == "echo: one two three"


def test_stream_with_a_callback(client):
    seen = []
    text = client.model("chat-demo").generate("one two three", callback=seen.append)
    assert text == "echo: one two three"
    assert len(seen) > 1 and "".join(seen) == text
    chunks = client.model("chat-demo").chat([{"role": "user", "content": "x y"}],
                                            stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(chunks)
    assert chunks[-1]["usage"]["completion_tokens"] == 3


def test_errors_are_typed_with_the_request_id(served, helpers):
    client = Sluice(served.url, helpers.KEY, headers={"X-Request-Id": "sdk-test-1"})
    with pytest.raises(NotFoundError) as caught:
        client.model("no-such-model").generate("hi")
    err = caught.value
    assert err.code == 404 and err.type == "not_found"
    assert err.request_id == "sdk-test-1"
    assert "no-such-model" in err.message
    with pytest.raises(PermissionDeniedError) as caught:
        Sluice(served.url, "sk-wrong-key-0123456789").model("chat-demo").generate("hi")
    assert caught.value.code == 403 and caught.value.request_id
    # a streaming request that is refused raises before the first piece
    with pytest.raises(NotFoundError):
        client.model("no-such-model").generate("hi", stream=True)


def test_429_is_retried_after_retry_after(gateway_factory, helpers, backends, caplog):
    gw = gateway_factory()
    # one request, then a token every 2 s
    r = gw.push(planned_snapshot(helpers, backends, {"rate_per_second": 0.5, "burst": 1}))
    assert r.status_code == 200, r.text
    impatient = Sluice(gw.url, PLAN_KEY, max_retries=0)
    assert impatient.model("chat-demo").generate("first") == "echo: first"
    with pytest.raises(RateLimitError) as caught:
        impatient.model("chat-demo").generate("second")
    err = caught.value
    assert err.code == 429 and err.type == "rate_limited"
    assert 1 <= err.retry_after <= 2 and err.request_id

    caplog.set_level(logging.WARNING, logger="sluice_client")
    patient = Sluice(gw.url, PLAN_KEY)
    started = time.monotonic()
    assert patient.model("chat-demo").generate("third") == "echo: third"
    # it waited for the bucket (Retry-After), once or twice, never gave up
    assert time.monotonic() - started >= 1.0
    assert 1 <= len(retries(caplog)) <= 2, retries(caplog)


def test_a_long_retry_after_is_not_waited_for(gateway_factory, helpers, backends):
    gw = gateway_factory()
    r = gw.push(planned_snapshot(helpers, backends, {"rate_per_second": 0.01, "burst": 1}))
    assert r.status_code == 200, r.text
    client = Sluice(gw.url, PLAN_KEY, max_retry_wait=10)
    client.model("chat-demo").generate("first")
    started = time.monotonic()
    with pytest.raises(RateLimitError) as caught:
        client.model("chat-demo").generate("second")
    assert caught.value.retry_after > 10
    assert time.monotonic() - started < 5


def test_503_is_retried_with_backoff_then_raised(gateway_factory, helpers, backends,
                                                  caplog):
    gw = gateway_factory()
    r = gw.push(planned_snapshot(helpers, backends, {"rate_per_second": 100}))
    assert r.status_code == 200, r.text
    caplog.set_level(logging.WARNING, logger="sluice_client")
    client = Sluice(gw.url, helpers.KEY, max_retries=2, backoff=0.05)
    with pytest.raises(ServiceUnavailableError) as caught:
        client.model("empty-demo").generate("hi")
    assert caught.value.code == 503 and caught.value.request_id
    assert len(retries(caplog)) == 2, retries(caplog)


def test_connection_errors_are_retried_then_raised(dead_port, caplog):
    caplog.set_level(logging.WARNING, logger="sluice_client")
    client = Sluice(f"http://127.0.0.1:{dead_port}", "sk-any", max_retries=2, backoff=0.05)
    with pytest.raises(APIConnectionError) as caught:
        client.model("chat-demo").generate("hi")
    assert caught.value.code is None
    assert len(retries(caplog)) == 2, retries(caplog)


def test_read_timeout_raises_without_resending(served, helpers, caplog):
    caplog.set_level(logging.WARNING, logger="sluice_client")
    client = Sluice(served.url, helpers.KEY, timeout=(5, 0.3),
                    headers={"X-Demo-Latency-Ms": "1500"})
    started = time.monotonic()
    with pytest.raises(APITimeoutError):
        client.model("chat-demo").generate("slow")
    assert time.monotonic() - started < 1.4
    assert retries(caplog) == []
