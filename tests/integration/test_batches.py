"""The OpenAI Batch API on the job machinery, driven by the official `openai` client
unchanged: files.create, batches.create, batches.retrieve, files.content — for a
model whose backend speaks another protocol than OpenAI's too."""
from __future__ import annotations

import io
import json

import openai
import pytest

from waiting import eventually


@pytest.fixture
def client(request):
    """The official client as alice, on the test's jobs stack (`own_jobs_stack` when it
    asks for one, else the module's)."""
    own = "own_jobs_stack" in request.fixturenames
    stack = request.getfixturevalue("own_jobs_stack" if own else "jobs_stack")
    _, key = stack.keys["alice"]
    c = openai.OpenAI(api_key=key, base_url=stack.gateway.url + "/v1", max_retries=0)
    yield c
    c.close()


def _jsonl(lines: list[dict]) -> io.BytesIO:
    f = io.BytesIO("".join(json.dumps(line) + "\n" for line in lines).encode())
    f.name = "requests.jsonl"
    return f


def test_batch_flow_with_the_official_client(jobs_stack, client):
    stack = jobs_stack
    # a second model served by a KServe v2 backend: the batch speaks OpenAI to both
    url = stack.start_backend("kserve-a", protocol="kserve_v2")
    model = stack.admin.create("models", name="tiny-v2", timeout_ms=5000)
    stack.admin.create("backends", name="kserve-a", model_id=model["id"], url=url,
                       protocol="kserve_v2")
    stack.wait_served()
    lines = [{"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "chat-demo", "messages": [{"role": "user",
                                                           "content": f"question {i}"}]}}
             for i in range(4)]
    lines.append({"custom_id": "other-protocol", "method": "POST",
                  "url": "/v1/chat/completions",
                  "body": {"model": "tiny-v2", "messages": [{"role": "user",
                                                             "content": "hi"}]}})
    lines.append({"custom_id": "unknown-model", "method": "POST",
                  "url": "/v1/chat/completions",
                  "body": {"model": "no-such-model", "messages": [{"role": "user",
                                                                   "content": "hi"}]}})
    uploaded = client.files.create(file=_jsonl(lines), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes > 0

    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"run": "ci"})
    assert batch.status == "in_progress" and batch.request_counts.total == 6

    done = eventually(lambda: (b := client.batches.retrieve(batch.id)).status == "completed"
                      and b, timeout=40, interval=0.2)
    assert done.request_counts.completed == 5 and done.request_counts.failed == 1
    assert done.metadata == {"run": "ci"}

    out = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
    by_id = {line["custom_id"]: line for line in out}
    assert set(by_id) == {"req-0", "req-1", "req-2", "req-3", "other-protocol"}
    for line in out:
        assert line["response"]["status_code"] == 200 and line["error"] is None
        assert line["response"]["body"]["object"] == "chat.completion"
    errors = [json.loads(line) for line in
              client.files.content(done.error_file_id).text.splitlines()]
    assert [e["custom_id"] for e in errors] == ["unknown-model"]
    assert errors[0]["response"]["status_code"] == 404
    assert errors[0]["error"]["code"] == "not_found"

    # another caller sees none of it
    _, bob = stack.keys["bob"]
    other = openai.OpenAI(api_key=bob, base_url=stack.gateway.url + "/v1", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        other.files.content(done.output_file_id)
    other.close()


def test_cancel_a_batch(own_jobs_stack, client):
    stack = own_jobs_stack   # its worker is stopped
    stack.stop("worker")   # nothing runs: every line stays queued
    lines = [{"custom_id": f"c-{i}", "method": "POST", "url": "/v1/embeddings",
              "body": {"model": "chat-demo", "input": "x"}} for i in range(3)]
    uploaded = client.files.create(file=_jsonl(lines), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings",
                                  completion_window="24h")
    cancelled = client.batches.cancel(batch.id)
    assert cancelled.status == "cancelled"
    assert cancelled.request_counts.failed == 3
    errors = client.files.content(cancelled.error_file_id).text.splitlines()
    assert [json.loads(e)["error"]["code"] for e in errors] == ["batch_cancelled"] * 3


def test_a_bad_input_file_is_refused(jobs_stack, client):
    uploaded = client.files.create(
        file=_jsonl([{"custom_id": "a", "method": "POST", "url": "/v1/embeddings",
                      "body": {"model": "chat-demo", "input": "x"}}]), purpose="batch")
    with pytest.raises(openai.BadRequestError) as exc:
        client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                              completion_window="24h")
    assert "url /v1/chat/completions" in str(exc.value)
