"""Backend protocol `openai_responses` (the demo's native Responses backend) through the
real gateway: Responses callers pass through (store, previous_response_id), chat and
completions callers are converted to it and back, streams and tool calls included,
with the official `openai` client unchanged."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import openai
import pytest
import requests
from gateway_readings import access_lines

from control_plane.runtime import procs
from waiting import eventually

REPO = Path(__file__).resolve().parents[2]

TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look something up",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def responses_backend(tmp_path_factory):
    port = procs.free_port()
    proc = procs.spawn([sys.executable, "-m", "control_plane.demo.backends", "--protocol",
                        "openai_responses", "--port", str(port), "--name", "resp-a"],
                       log=tmp_path_factory.mktemp("resp") / "resp-a.log", cwd=REPO)
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
        yield {"id": 1, "name": "resp-a", "protocol": "openai_responses", "scheme": "http",
               "host": "127.0.0.1", "port": port, "host_header": f"localhost:{port}",
               "base_path": "", "weight": 100}
    finally:
        procs.stop(proc)


@pytest.fixture
def client(gateway, helpers, responses_backend):
    r = gateway.push(helpers.make_snapshot(1, {
        "resp-demo": (5000, [responses_backend])}))
    assert r.status_code == 200, r.text
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=helpers.KEY, max_retries=0)


def test_responses_callers_pass_through_with_stored_state(client):
    first = client.responses.create(model="resp-demo", input="remember me")
    assert first.output_text == "echo: remember me" and first.store is True
    again = client.responses.create(model="resp-demo", input="and now",
                                    previous_response_id=first.id)
    assert again.previous_response_id == first.id
    # the backend read the earlier turn: "remember me" + "echo: remember me" + "and now"
    assert again.usage.input_tokens == 7


def test_responses_stream_passes_through(client):
    with client.responses.stream(model="resp-demo", input="one two") as s:
        types = [e.type for e in s]
        final = s.get_final_response()
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert final.output_text == "echo: one two"


def test_chat_callers_are_converted(client):
    r = client.chat.completions.create(model="resp-demo", max_tokens=20, messages=[
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}])
    assert r.choices[0].message.content == "echo: hello there"
    assert r.choices[0].finish_reason == "stop"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (4, 3)


def test_chat_tool_calls_round_trip(client):
    messages = [{"role": "user", "content": "use a tool rome"}]
    r = client.chat.completions.create(model="resp-demo", messages=messages, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"query": "rome"}
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "warm"}]
    r = client.chat.completions.create(model="resp-demo", messages=messages, tools=TOOLS)
    assert r.choices[0].message.content == "tool said: warm"


def test_chat_stream_with_parallel_tool_calls_and_usage(client):
    chunks = list(client.chat.completions.create(
        model="resp-demo", messages=[{"role": "user", "content": "use every tool a b"}],
        tools=TOOLS, stream=True, stream_options={"include_usage": True}))
    calls: dict[int, dict] = {}
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            entry = calls.setdefault(tc.index, {"id": tc.id, "name": tc.function.name,
                                                "arguments": ""})
            entry["arguments"] += tc.function.arguments or ""
    assert [calls[i]["name"] for i in sorted(calls)] == ["lookup", "weather"]
    assert all(json.loads(c["arguments"]) == {"query": "a b"} for c in calls.values())
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["tool_calls"]
    assert chunks[-1].usage.prompt_tokens == 5   # the backend's own count, "use every tool a b"


def test_chat_text_stream(client):
    chunks = list(client.chat.completions.create(
        model="resp-demo", messages=[{"role": "user", "content": "one two three"}], stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: one two three"


def test_completions_callers_are_converted(client):
    r = client.completions.create(model="resp-demo", prompt="say this")
    assert r.choices[0].text == "echo: say this"
    chunks = list(client.completions.create(model="resp-demo", prompt="say this", stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "echo: say this"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_fields_responses_cannot_take_are_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="resp-demo", stop=["x"],
                                       messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["param"] == "stop"


def test_a_kept_response_reads_back_through_its_backend(client, gateway):
    first = client.responses.create(model="resp-demo", input="keep this")
    got = client.responses.retrieve(first.id,   # the only model that keeps responses
                                    extra_headers={"X-Request-Id": "read-back-1"})
    assert got.id == first.id and got.output_text == "echo: keep this"
    # the log line names the model that kept it (its metrics too: ctx.target)
    assert eventually(lambda: [line["model"] for line in access_lines(gateway, 1, timeout=0.5)
                               if line["request_id"] == "read-back-1"]) == ["resp-demo"]
    got = client.responses.retrieve(first.id, extra_query={"model": "resp-demo"})
    assert got.id == first.id
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.retrieve("resp_unknown")
    assert e.value.body["type"] == "not_found_error"   # the backend's own type, kept


def test_a_kept_response_is_listed_cancelled_and_deleted_through_its_backend(client):
    first = client.responses.create(model="resp-demo", input=[
        {"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
    items = client.responses.input_items.list(first.id)   # newest first, as OpenAI lists
    assert [(i.role, i.content[0].text) for i in items.data] == [("user", "two"), ("user", "one")]
    page = client.responses.input_items.list(first.id, order="asc", limit=1,
                                             extra_query={"model": "resp-demo"})
    assert [i.content[0].text for i in page.data] == ["one"] and page.has_more
    # only a background response can be cancelled (the backend's 400, passed on)
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(first.id)
    queued = client.responses.create(model="resp-demo", input="later", background=True)
    assert queued.status == "queued"
    assert client.responses.cancel(queued.id).status == "cancelled"
    assert client.responses.retrieve(queued.id).status == "cancelled"
    gone = json.loads(client.responses.with_raw_response.delete(first.id).text)
    assert gone == {"id": first.id, "object": "response.deleted", "deleted": True}
    assert client.responses.delete(queued.id) is None   # the client's own reading of it
    for rid in (first.id, queued.id):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(rid)


def test_a_kept_responses_path_takes_only_its_methods(client, gateway, helpers):
    r = requests.put(gateway.url + "/v1/responses/resp_1", timeout=10,
                     headers={"Authorization": f"Bearer {helpers.KEY}"})
    helpers.assert_error(r, 405, "method_not_allowed")
    assert r.headers["Allow"] == "GET, DELETE"
    r = requests.get(gateway.url + "/v1/responses/resp_1/cancel", timeout=10,
                     headers={"Authorization": f"Bearer {helpers.KEY}"})
    assert (r.status_code, r.headers["Allow"]) == (405, "POST")


def _every_kept_call(c, rid, **kw):
    """Each of a kept response's calls through client `c`, as thunks."""
    return (lambda: c.responses.retrieve(rid, **kw),
            lambda: c.responses.delete(rid, **kw),
            lambda: c.responses.input_items.list(rid, **kw),
            lambda: c.responses.cancel(rid, **kw))


def test_reading_back_needs_a_model_that_keeps_responses(gateway, helpers, backends,
                                                         responses_backend):
    r = gateway.push(helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)])}))
    assert r.status_code == 200, r.text
    c = openai.OpenAI(base_url=gateway.url + "/v1", api_key=helpers.KEY, max_retries=0)
    for call in _every_kept_call(c, "resp_1"):
        with pytest.raises(openai.NotFoundError):
            call()
    for call in _every_kept_call(c, "resp_1", extra_query={"model": "chat-demo"}):
        with pytest.raises(openai.BadRequestError) as e:
            call()
        assert e.value.body["param"] == "model"
    r = gateway.push(helpers.make_snapshot(1, {"resp-x": (5000, [responses_backend]),
                                               "resp-y": (5000, [responses_backend])}))
    assert r.status_code == 200, r.text
    for call in _every_kept_call(c, "resp_1"):   # two models keep responses: which?
        with pytest.raises(openai.BadRequestError) as e:
            call()
        assert e.value.body["param"] == "model"


def test_a_kept_responses_calls_count_as_requests_of_the_consumer(
        gateway, helpers, responses_backend):
    key = "sk-test-respb-limits-0123456789abcdef"
    snap = helpers.make_snapshot(1, {"resp-limited": (5000, [responses_backend])})
    helpers.add_planned(snap, key, {"daily_requests": 3}, consumer_id=4)
    for k in snap["keys"].values():
        if k["consumer_id"] == 4:
            k["id"] = 24   # counters of its own (they are kept per key)
    assert gateway.push(snap).status_code == 200
    c = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    first = c.responses.create(model="resp-limited", input="count me")   # 1 of 3
    assert c.responses.retrieve(first.id).id == first.id                # 2
    assert c.responses.input_items.list(first.id).data                  # 3
    for call in _every_kept_call(c, first.id):
        with pytest.raises(openai.RateLimitError) as e:
            call()
        assert "daily request quota" in e.value.message


def test_a_read_back_with_no_backend_there_counts_nothing(gateway, helpers, responses_backend):
    """A kept response's call while the model has no backend to take it (its one
    backend weighted 0: drained) is a 503, and the plan counts none of them: once a
    backend is back, the consumer's one request of the day still goes through."""
    key = "sk-test-respb-503-0123456789abcdef"
    snap = helpers.make_snapshot(1, {"resp-drained": (5000, [{**responses_backend,
                                                              "weight": 0}])})
    helpers.add_planned(snap, key, {"daily_requests": 1, "rate_per_second": 0.001,
                                    "burst": 1}, consumer_id=2604)
    assert gateway.push(snap).status_code == 200
    c = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    for call in _every_kept_call(c, "resp_1"):
        with pytest.raises(openai.InternalServerError) as e:
            call()
        assert e.value.status_code == 503 and "no backend" in e.value.message
    snap["models"]["resp-drained"]["backends"][0]["weight"] = 100
    assert gateway.push(snap).status_code == 200
    with pytest.raises(openai.NotFoundError):   # the backend's own 404: counted
        c.responses.retrieve("resp_unknown")
    with pytest.raises(openai.RateLimitError):
        c.responses.retrieve("resp_unknown")


@pytest.mark.parametrize("stream", [False, True])
def test_usage_counted_once_for_every_caller_of_a_responses_backend(
        gateway, helpers, responses_backend, stream):
    # a model of its own per case: counters per consumer, model and day carry over
    model = f"resp-usage-{int(stream)}"
    key = "sk-test-respb-usage-0123456789abcdef"
    snap = helpers.make_snapshot(1, {model: (5000, [responses_backend])})
    helpers.add_planned(snap, key, {"monthly_tokens": 100000})
    assert gateway.push(snap).status_code == 200
    c = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    seen = []   # (prompt, completion) as each caller was told
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    for content, extra in (("hello there", {}), ("use a tool x", {"tools": tools})):
        msgs = [{"role": "user", "content": content}]
        if stream:
            chunks = list(c.chat.completions.create(model=model, messages=msgs, stream=True,
                                                    stream_options={"include_usage": True},
                                                    **extra))
            u = chunks[-1].usage
        else:
            u = c.chat.completions.create(model=model, messages=msgs, **extra).usage
        seen.append((u.prompt_tokens, u.completion_tokens))
    # Responses callers pass through: the backend's own usage, read from its answer
    if stream:
        with c.responses.stream(model=model, input="one two") as s:
            list(s)
            u = s.get_final_response().usage
    else:
        u = c.responses.create(model=model, input="one two").usage
    seen.append((u.input_tokens, u.output_tokens))
    assert seen == [(2, 3), (4, 2), (2, 3)]   # the demo counts words
    day = time.strftime("%Y%m%d", time.gmtime())
    want = [3, 8, 8, 16, 0, 0, 0, 0]   # (no audio, characters, images, session)
    eventually(lambda: gateway.usage()["counters"].get(f"{day}|3|{model}") == want,
               message="usage counters")
