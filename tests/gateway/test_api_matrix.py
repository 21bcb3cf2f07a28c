"""Every caller API × every chat-capable backend protocol, through one real gateway and
the official clients (issue 26): OpenAI chat and Responses (`openai`) and Anthropic
Messages (`anthropic`) against an `openai`, an `openai_responses` and an `anthropic`
demo backend and the Gemini imitation (tests/gateway/vendor_gemini.py, reached
through the `gemini` preset), each streamed and whole, with a tool call (and its
result sent back) and without.

In each cell the caller gets the backend's answer in its own API, and the tokens the
backend reported are counted once: once in the answer's usage (in the caller's field
names; a stream reports them once), once in the gateway's usage counters and once in
the request's access-log line (found by its X-Request-Id).

What each backend reports is its documented rule, whitespace-separated words:
prompt tokens over the texts of the conversation (Gemini's imitation: text parts only,
so not a functionResponse), completion tokens over the answer's text and, except for
Gemini's (a functionCall has no text), a tool call's arguments as JSON. No pair of the
matrix is refused by the docs (docs/models-and-backends.md: tools cross between these
four protocols); the refusals of the pairs it does hold are at the end."""
from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import anthropic
import openai
import pytest

import api_callers
import vendor_gemini
from api_callers import Turn
from backend_http import served
from control_plane.runtime import procs
from control_plane.services import presets
from control_plane.services.snapshot import backend_entry
from control_plane.tables.config import Backend as BackendRow
from gateway_readings import access_lines

REPO = Path(__file__).resolve().parents[2]

BACKENDS = ("openai", "openai_responses", "anthropic", "gemini")
MODEL = {b: f"matrix-{b}" for b in BACKENDS}
ECHO = {"openai": "echo: ", "openai_responses": "echo: ", "anthropic": "echo: ",
        "gemini": "gemini says: "}
PLAIN = "hello from the matrix"
QUERY = "weather in Oslo"
ASK = "use a tool " + QUERY
RESULT = "sunny and mild"
PLAN = {"id": 7, "name": "matrix"}   # a plan without limits: its tokens are counted


def words(s: str) -> int:
    return len(s.split())


def reported(backend: str, step: str) -> tuple[int, int]:
    """(prompt, completion) tokens `backend` reports for `step` of a cell: "text" (a
    plain question), "call" (the tool call) or "result" (the answer to its result)."""
    if step == "text":
        return words(PLAIN), words(ECHO[backend] + PLAIN)
    if step == "call":
        return words(ASK), 0 if backend == "gemini" else words(json.dumps({"query": QUERY}))
    tool_result = 0 if backend == "gemini" else words(RESULT)
    return words(ASK) + tool_result, words("tool said: " + RESULT)


def _demo_backend(protocol: str, log_dir: Path):
    port = procs.free_port()
    proc = procs.spawn([sys.executable, "-m", "control_plane.demo.backends", "--protocol",
                        protocol, "--port", str(port), "--name", f"matrix-{protocol}"],
                       log=log_dir / f"{protocol}.log", cwd=REPO)
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
    except Exception:
        procs.stop(proc)
        raise
    return proc, port


def _gemini_entry(bid: int, port: int) -> dict:
    """The Gemini imitation as the admin API makes a `gemini` preset backend."""
    row = presets.apply({"name": "matrix-gemini", "model_id": bid, "preset": "gemini",
                         "base_url": f"http://127.0.0.1:{port}",
                         "api_key": vendor_gemini.KEY, "upstream_model": vendor_gemini.MODEL})
    return backend_entry(BackendRow(id=bid, weight=1, mapping=None, **row))


@pytest.fixture(scope="module")
def matrix_backends(tmp_path_factory):
    """One backend per protocol, for the module: snapshot entries by protocol."""
    log_dir = tmp_path_factory.mktemp("matrix-backends")
    started = []
    try:
        entries = {}
        for bid, protocol in enumerate(BACKENDS[:3], start=1):
            proc, port = _demo_backend(protocol, log_dir)
            started.append(proc)
            entries[protocol] = {"id": bid, "name": f"matrix-{protocol}", "protocol": protocol,
                                 "scheme": "http", "host": "127.0.0.1", "port": port,
                                 "host_header": f"localhost:{port}", "base_path": "",
                                 "weight": 100}
        with served(vendor_gemini.GeminiImitation) as gemini_port:
            entries["gemini"] = _gemini_entry(4, gemini_port)
            yield entries
    finally:
        for proc in started:
            procs.stop(proc)


@pytest.fixture
def gw(gateway, helpers, matrix_backends):
    """The module's gateway serving one model per backend; consumer 1 (KEY) on a plan."""
    snap = helpers.make_snapshot(1, {MODEL[b]: (5000, [matrix_backends[b]]) for b in BACKENDS})
    snap["consumers"]["1"]["plan_id"] = PLAN["id"]
    snap["plans"] = {str(PLAN["id"]): PLAN}
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    return gateway


@pytest.fixture
def clients(gw, helpers):
    oai = openai.OpenAI(base_url=gw.url + "/v1", api_key=helpers.KEY, max_retries=0)
    claude = anthropic.Anthropic(base_url=gw.url, api_key=helpers.KEY, max_retries=0)
    return {"chat": oai, "responses": oai, "messages": claude}


def counted(gw, model: str) -> list[int]:
    """Consumer 1's [requests, prompt, completion, total] for `model`, all days."""
    out = [0, 0, 0, 0]
    for key, row in gw.usage()["counters"].items():
        if key.split("|")[1:] == ["1", model]:
            out = [a + b for a, b in zip(out, row)]
    return out


def log_line(gw, rid: str, timeout: float = 10.0) -> dict:
    """The one access-log line of request `rid` (the log is flushed each second)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [x for x in access_lines(gw, 0) if x["request_id"] == rid]
        if lines or time.monotonic() > deadline:
            assert len(lines) == 1, lines
            return lines[0]
        time.sleep(0.2)


def ask(gw, clients, caller: str, backend: str, turn: Turn, stream: bool, step: str):
    """One request of a cell: the caller's answer, with the backend's tokens checked
    once in the answer, the counters and the access log."""
    rid = f"matrix-{uuid.uuid4().hex}"
    before = counted(gw, MODEL[backend])
    got = api_callers.CALLERS[caller](clients[caller], MODEL[backend], turn, stream, rid)
    assert got.request_id == rid
    prompt, completion = reported(backend, step)
    assert got.usages == [(prompt, completion)], (step, got.usages)
    assert counted(gw, MODEL[backend]) == \
        [before[0] + 1, before[1] + prompt, before[2] + completion,
         before[3] + prompt + completion]
    line = log_line(gw, rid)
    assert (line["status"], line["model"]) == ("200", MODEL[backend])
    assert (line["prompt_tokens"], line["completion_tokens"]) == (str(prompt), str(completion))
    return got


FINISH = {  # caller -> (finish of a text answer, of a tool call)
    "chat": ("stop", "tool_calls"),
    "responses": ("completed", "completed"),
    "messages": ("end_turn", "tool_use"),
}


@pytest.mark.parametrize("tools", [False, True], ids=["text", "tool"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("caller", list(api_callers.CALLERS))
def test_caller_meets_backend(gw, clients, caller, backend, stream, tools):
    if not tools:
        got = ask(gw, clients, caller, backend, Turn(PLAIN), stream, "text")
        assert (got.text, got.calls) == (ECHO[backend] + PLAIN, [])
        assert got.finish == FINISH[caller][0]
        return
    got = ask(gw, clients, caller, backend, Turn(ASK, tools=True), stream, "call")
    assert len(got.calls) == 1 and got.text == "", (got.text, got.calls)
    call = got.calls[0]
    assert (call.name, call.arguments) == ("lookup", {"query": QUERY})
    assert call.id
    assert got.finish == FINISH[caller][1]
    got = ask(gw, clients, caller, backend,
              Turn(ASK, tools=True, call=call, result=RESULT), stream, "result")
    assert (got.text, got.calls) == ("tool said: " + RESULT, [])
    assert got.finish == FINISH[caller][0]


# what the docs say a pair of the matrix cannot carry: caller, backend, the field sent
# and the param the 400 names. Every one is refused before the plan counts the request
# (sluice.carry: the backend adapters' own checks of the caller's params), so neither
# the request nor any token is counted, and no limit is taken.
EARLIER = {"previous_response_id": "resp_earlier"}
REFUSED = [
    ("responses", "openai", EARLIER, "previous_response_id"),
    ("responses", "anthropic", EARLIER, "previous_response_id"),
    ("responses", "gemini", EARLIER, "previous_response_id"),
    ("responses", "anthropic", {"temperature": 1.5}, "temperature"),
    ("responses", "anthropic", {"text": {"format": {"type": "json_object"}}}, "text.format"),
    ("messages", "openai_responses", {"stop_sequences": ["END"]}, "stop_sequences"),
    ("messages", "openai_responses", {"top_k": 5}, "top_k"),
    ("chat", "openai_responses", {"stop": ["END"]}, "stop"),
    ("chat", "anthropic", {"n": 2}, "n"),
    ("chat", "gemini", {"n": 2}, "n"),
]


def refused(clients, caller: str, backend: str, extra: dict, rid: str) -> dict:
    """Send `extra` from `caller` to `backend`'s model: the 400's error object."""
    kw = {"model": MODEL[backend], "extra_headers": {"X-Request-Id": rid}, **extra}
    if caller == "messages":
        with pytest.raises(anthropic.BadRequestError) as exc:
            clients[caller].messages.create(max_tokens=api_callers.MAX_TOKENS,
                                            messages=[{"role": "user", "content": PLAIN}], **kw)
        err = exc.value.body["error"]
        assert err["type"] == "invalid_request_error" and exc.value.body["request_id"] == rid
    else:
        with pytest.raises(openai.BadRequestError) as exc:
            if caller == "chat":
                clients[caller].chat.completions.create(
                    messages=[{"role": "user", "content": PLAIN}], **kw)
            else:
                clients[caller].responses.create(input=PLAIN, **kw)
        err = exc.value.body
        assert err["request_id"] == rid
    assert exc.value.status_code == 400
    return err


@pytest.mark.parametrize("caller, backend, extra, param", REFUSED,
                         ids=[f"{c}-{b}-{p}" for c, b, _, p in REFUSED])
def test_what_a_pair_cannot_carry_is_a_400_naming_it(gw, clients, caller, backend, extra,
                                                    param):
    rid = f"matrix-{uuid.uuid4().hex}"
    before = counted(gw, MODEL[backend])
    err = refused(clients, caller, backend, extra, rid)
    assert err["param"] == param, err
    assert counted(gw, MODEL[backend]) == before   # neither the request nor tokens
    line = log_line(gw, rid)
    assert (line["status"], line["prompt_tokens"], line["completion_tokens"]) == ("400", "", "")


LIMITED = "sk-matrix-limited-0123456789abcdef"
LIMITED_ID = 2607   # a consumer id of its own: the shared gateway keeps counters by it


def test_refused_pairs_take_no_limit(gateway, helpers, matrix_backends):
    """A consumer whose plan allows one request (a rate bucket of one, refilled in
    1000 s, and a daily quota of one) sends every refused pair first: each is a 400,
    and its one request still goes through afterwards; the next is refused."""
    gw = gateway
    snap = helpers.make_snapshot(1, {MODEL[b]: (5000, [matrix_backends[b]]) for b in BACKENDS})
    helpers.add_planned(snap, LIMITED, {"rate_per_second": 0.001, "burst": 1,
                                        "daily_requests": 1},
                        name="matrix-limited", consumer_id=LIMITED_ID)
    assert gw.push(snap).status_code == 200
    mine = {"chat": openai.OpenAI(base_url=gw.url + "/v1", api_key=LIMITED, max_retries=0),
            "messages": anthropic.Anthropic(base_url=gw.url, api_key=LIMITED, max_retries=0)}
    mine["responses"] = mine["chat"]
    for caller, backend, extra, param in REFUSED:
        err = refused(mine, caller, backend, extra, f"matrix-{uuid.uuid4().hex}")
        assert err["param"] == param, err
    ok = mine["chat"].chat.completions.create(
        model=MODEL["openai"], messages=[{"role": "user", "content": PLAIN}])
    assert ok.choices[0].message.content == ECHO["openai"] + PLAIN
    with pytest.raises(openai.RateLimitError):
        mine["chat"].chat.completions.create(
            model=MODEL["openai"], messages=[{"role": "user", "content": PLAIN}])
    rows = {key.split("|")[2]: row[0] for key, row in gw.usage()["counters"].items()
            if key.split("|")[1] == str(LIMITED_ID)}
    assert rows == {MODEL["openai"]: 1}, rows   # the one request that went through
