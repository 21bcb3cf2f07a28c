"""Hosted vendors as presets, end to end: each backend is made the way the admin API
makes it (control_plane/services/presets.py fills it from the preset and a few
values; services/snapshot.py turns it into its snapshot entry), pointed at a local
imitation of that vendor (tests/gateway/vendor_*.py: real HTTP servers that refuse
a request not shaped as the vendor documents), and called through the real gateway
with the official OpenAI client (and Anthropic's, for an Anthropic caller)."""
from __future__ import annotations

import json
from urllib.parse import urlsplit

import anthropic
import openai
import pytest

from control_plane.services import presets
from control_plane.services.snapshot import backend_entry
from control_plane.tables.config import Backend as BackendRow
import vendor_anthropic
import vendor_gemini
from backend_http import served
from vendor_openai import FAIL, HANG, VENDORS, handler_for

# Sluice model name -> (preset, the values the operator gives besides base_url)
COMPATIBLE = {
    "gpt-4o-mini": ("openai", {"api_key": "sk-openai-test"}),
    "azure-chat": ("azure_openai", {"api_key": "az-key-123", "deployment": "gpt4o-prod"}),
    "deepseek-chat": ("deepseek", {"api_key": "sk-deepseek-test"}),
    "qwen-plus": ("dashscope", {"api_key": "sk-dashscope-test"}),
    "mistral-small-latest": ("mistral", {"api_key": "mistral-key"}),
    "Qwen/Qwen2.5-7B-Instruct": ("vllm", {}),
    "meta-llama/Llama-3.1-8B-Instruct": ("sglang", {"api_key": "sglang-key"}),
}
GEMINI = "gemini-2.0-flash"
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "look something up",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}]


def preset_entry(bid: int, preset: str, port: int, **values) -> dict:
    """A backend made from `preset` as the admin API makes one, whose base URL is the
    imitation's (the preset's own path kept), as its snapshot entry."""
    p = presets.PRESETS[preset]
    # the preset's own base path (DashScope's /compatible-mode), on the imitation's port
    base_path = urlsplit(p.base_url).path if "{" not in p.base_url else ""
    base = f"http://127.0.0.1:{port}{base_path}"
    row = presets.apply({"name": f"{preset}-{bid}", "model_id": bid, "preset": preset,
                         "base_url": base, **values})
    assert row["protocol"] == p.protocol and row["preset"] == preset
    return backend_entry(BackendRow(id=bid, weight=1, mapping=None, **row))


@pytest.fixture(scope="module")
def imitations():
    """One imitation per vendor, on free ports, for the module."""
    handlers = {name: handler_for(v) for name, v in VENDORS.items()}   # (and keyed_proxy)
    handlers["gemini"] = vendor_gemini.GeminiImitation
    handlers["anthropic"] = vendor_anthropic.AnthropicImitation
    ports, stack = {}, []
    try:
        for name, handler in handlers.items():
            cm = served(handler)
            ports[name] = cm.__enter__()
            stack.append(cm)
        yield {name: (handlers[name], ports[name]) for name in handlers}
    finally:
        for cm in reversed(stack):
            cm.__exit__(None, None, None)


@pytest.fixture
def vendors(gateway, helpers, imitations):
    """The gateway serving one model per preset, each on its vendor's imitation."""
    models = {}
    for i, (model, (preset, values)) in enumerate(COMPATIBLE.items(), start=1):
        models[model] = (5000, [preset_entry(i, preset, imitations[preset][1], **values)])
    models["proxied-model"] = (5000, [preset_entry(
        40, "vllm", imitations["keyed_proxy"][1], auth_header_name="X-API-Key",
        auth_header="proxy-key")])
    models[vendor_anthropic.MODEL] = (5000, [preset_entry(
        60, "anthropic", imitations["anthropic"][1], api_key=vendor_anthropic.KEY)])
    models[GEMINI] = (5000, [preset_entry(50, "gemini", imitations["gemini"][1],
                                          api_key=vendor_gemini.KEY, upstream_model=GEMINI)])
    # Azure again, slow for its model's timeout, with OpenAI as its fallback
    models["azure-slow"] = (500, [preset_entry(70, "azure_openai",
                                               imitations["azure_openai"][1],
                                               api_key="az-key-123", deployment="gpt4o-prod")])
    snap = helpers.make_snapshot(1, models)
    snap["models"]["azure-slow"]["fallback_model"] = "gpt-4o-mini"
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=helpers.KEY, max_retries=0)


def last_seen(imitations, name: str) -> dict:
    return imitations[name][0].seen[-1]


@pytest.mark.parametrize("model", list(COMPATIBLE))
def test_openai_compatible_chat_reaches_the_vendor_as_documented(vendors, imitations, model):
    preset = COMPATIBLE[model][0]
    vendor = VENDORS[preset]
    out = vendors.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello vendor"}])
    assert out.choices[0].message.content == f"{preset} says: hello vendor"
    assert out.usage.prompt_tokens == 2
    seen = last_seen(imitations, preset)
    assert seen["path"] == vendor.chat_path
    assert seen["query"] == vendor.query
    if vendor.key:
        assert seen["headers"][vendor.key_header.lower()] == \
            vendor.key_format.format(key=vendor.key)
    # the caller's own key never reaches the vendor
    assert "x-api-key" not in seen["headers"]
    if vendor.key_header != "Authorization" or not vendor.key:
        assert "authorization" not in seen["headers"]


def test_a_fallback_gets_none_of_the_first_vendors_shape(vendors, imitations):
    """Azure times out; its fallback (OpenAI) gets neither Azure's key header nor its
    api-version query."""
    raw = vendors.chat.completions.with_raw_response.create(
        model="azure-slow", messages=[{"role": "user", "content": HANG}])
    assert raw.headers["X-Sluice-Fallback"] == "gpt-4o-mini"
    assert raw.parse().choices[0].message.content == f"openai says: {HANG}"
    azure, openai_seen = last_seen(imitations, "azure_openai"), last_seen(imitations, "openai")
    assert azure["query"] == {"api-version": "2024-10-21"} and "api-key" in azure["headers"]
    assert openai_seen["path"] == "/v1/chat/completions" and openai_seen["query"] == {}
    assert "api-key" not in openai_seen["headers"]
    assert openai_seen["headers"]["authorization"] == "Bearer sk-openai-test"


def test_key_in_x_api_key(vendors, imitations):
    """A key header set by hand (here X-API-Key, which callers' own keys use too)."""
    out = vendors.chat.completions.create(
        model="proxied-model", messages=[{"role": "user", "content": "through the proxy"}])
    assert out.choices[0].message.content == "keyed_proxy says: through the proxy"
    headers = last_seen(imitations, "keyed_proxy")["headers"]
    assert headers["x-api-key"] == "proxy-key" and "authorization" not in headers


@pytest.mark.parametrize("model", list(COMPATIBLE))
def test_openai_compatible_stream(vendors, model):
    preset = COMPATIBLE[model][0]
    stream = vendors.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "stream this please"}],
        stream=True, stream_options={"include_usage": True})
    text, usage = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    assert text.strip() == f"{preset} says: stream this please"
    assert usage.prompt_tokens == 3


@pytest.mark.parametrize("model", list(COMPATIBLE))
def test_vendor_error_reaches_the_caller(vendors, model):
    preset = COMPATIBLE[model][0]
    with pytest.raises(openai.BadRequestError) as exc:
        vendors.chat.completions.create(model=model,
                                        messages=[{"role": "user", "content": FAIL}])
    err = exc.value
    assert err.status_code == 400
    # the vendor's own message, whatever its error shape (OpenAI's, Azure's, flat)
    assert f"{preset} refused: bad input" in err.message
    assert err.body["request_id"] == err.response.headers["X-Request-Id"]


def test_azure_embeddings_use_the_path_map(vendors, imitations):
    out = vendors.embeddings.create(model="azure-chat", input=["one two", "three"])
    assert [d.embedding[0] for d in out.data] == [7.0, 5.0]
    seen = last_seen(imitations, "azure_openai")
    assert seen["path"] == "/openai/deployments/gpt4o-prod/embeddings"
    assert seen["query"] == {"api-version": "2024-10-21"}


def test_gemini_chat_converted_both_ways(vendors, imitations):
    out = vendors.chat.completions.create(
        model=GEMINI, temperature=0.5, top_p=0.9, stop=["END"],
        messages=[{"role": "system", "content": "be brief"},
                  {"role": "user", "content": "hello gemini"}])
    assert out.choices[0].message.content == "[be brief] gemini says: hello gemini"
    assert out.choices[0].finish_reason == "stop"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (2, 6)
    seen = last_seen(imitations, "gemini")
    assert seen["path"] == f"/v1beta/models/{GEMINI}:generateContent"
    assert seen["headers"]["x-goog-api-key"] == vendor_gemini.KEY
    assert "authorization" not in seen["headers"]
    body = seen["body"]
    assert body["systemInstruction"] == {"parts": [{"text": "be brief"}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hello gemini"}]}]
    assert body["generationConfig"] == {"temperature": 0.5, "topP": 0.9,
                                        "stopSequences": ["END"]}


def test_gemini_max_tokens_is_length(vendors, imitations):
    out = vendors.chat.completions.create(
        model=GEMINI, max_tokens=2, messages=[{"role": "user", "content": "a b c d"}])
    assert out.choices[0].message.content == "gemini says:"
    assert out.choices[0].finish_reason == "length"
    assert last_seen(imitations, "gemini")["body"]["generationConfig"] == {"maxOutputTokens": 2}


def test_gemini_stream_frame_by_frame(vendors, imitations):
    stream = vendors.chat.completions.create(
        model=GEMINI, stream=True, messages=[{"role": "user", "content": "one two three"}])
    deltas = [c.choices[0].delta.content for c in stream if c.choices and
              c.choices[0].delta.content]
    assert "".join(deltas) == "gemini says: one two three"
    assert len(deltas) == 5   # one per frame of the vendor's stream
    seen = last_seen(imitations, "gemini")
    assert seen["path"] == f"/v1beta/models/{GEMINI}:streamGenerateContent"
    assert seen["query"] == {"alt": "sse"}


def test_gemini_tool_round_trip(vendors, imitations):
    messages = [{"role": "user", "content": "use a tool weather in Paris"}]
    out = vendors.chat.completions.create(model=GEMINI, messages=messages, tools=TOOLS)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"query": "weather in Paris"}
    sent = last_seen(imitations, "gemini")["body"]
    assert sent["tools"] == [{"functionDeclarations": [{
        "name": "lookup", "description": "look something up",
        "parameters": TOOLS[0]["function"]["parameters"]}]}]
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    out = vendors.chat.completions.create(model=GEMINI, messages=messages, tools=TOOLS)
    assert out.choices[0].message.content == "tool said: sunny, 21 C"
    sent = last_seen(imitations, "gemini")["body"]["contents"]
    assert sent[1] == {"role": "model", "parts": [{"functionCall": {
        "name": "lookup", "args": {"query": "weather in Paris"}}}]}
    assert sent[2] == {"role": "user", "parts": [{"functionResponse": {
        "name": "lookup", "response": {"output": "sunny, 21 C"}}}]}


def test_gemini_streamed_tool_call(vendors, imitations):
    stream = vendors.chat.completions.create(
        model=GEMINI, stream=True, tools=TOOLS,
        messages=[{"role": "user", "content": "use a tool weather in Rome"}])
    calls, finish = {}, None
    for chunk in stream:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                c["id"] = tc.id or c["id"]
                c["name"] = tc.function.name or c["name"]
                c["arguments"] += tc.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert list(calls) == [0] and calls[0]["name"] == "lookup" and calls[0]["id"]
    assert json.loads(calls[0]["arguments"]) == {"query": "weather in Rome"}
    assert last_seen(imitations, "gemini")["path"].endswith(":streamGenerateContent")


def test_gemini_from_the_responses_api(vendors, imitations):
    tools = [{"type": "function", **TOOLS[0]["function"]}]
    with vendors.responses.stream(model=GEMINI, input="use a tool weather in Oslo",
                                  tools=tools) as s:
        events = list(s)
        final = s.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["lookup"]
    assert json.loads(calls[0].arguments) == {"query": "weather in Oslo"}
    done = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(a) for a in done] == [{"query": "weather in Oslo"}]
    second = vendors.responses.create(model=GEMINI, tools=tools, input=[
        {"role": "user", "content": "use a tool weather in Oslo"},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "lookup",
         "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "snow"}])
    assert second.output_text == "tool said: snow"
    sent = last_seen(imitations, "gemini")["body"]["contents"]
    assert sent[2] == {"role": "user", "parts": [{"functionResponse": {
        "name": "lookup", "response": {"output": "snow"}}}]}


def test_gemini_error_in_its_shape(vendors):
    with pytest.raises(openai.BadRequestError) as exc:
        vendors.chat.completions.create(model=GEMINI,
                                        messages=[{"role": "user", "content": FAIL}])
    assert exc.value.status_code == 400
    assert "INVALID_ARGUMENT: gemini refused: bad input" in exc.value.message


def test_gemini_refuses_what_it_cannot_carry(vendors):
    with pytest.raises(openai.BadRequestError) as exc:
        vendors.chat.completions.create(model=GEMINI, n=2,
                                        messages=[{"role": "user", "content": "hi"}])
    assert "n = 1" in exc.value.message


def test_anthropic_preset_through_the_gateway(vendors, imitations):
    out = vendors.chat.completions.create(
        model=vendor_anthropic.MODEL, max_tokens=64,
        messages=[{"role": "system", "content": "be brief"},
                  {"role": "user", "content": "hello claude"}])
    assert out.choices[0].message.content == "anthropic says: hello claude"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (2, 4)
    seen = last_seen(imitations, "anthropic")
    assert seen["path"] == "/v1/messages"
    assert seen["headers"]["x-api-key"] == vendor_anthropic.KEY
    assert seen["headers"]["anthropic-version"] == vendor_anthropic.VERSION
    assert "authorization" not in seen["headers"]
    # the system message lifted out of `messages`, max_tokens as the caller gave it
    assert seen["body"]["system"] in ("be brief", [{"type": "text", "text": "be brief"}])
    assert [m["role"] for m in seen["body"]["messages"]] == ["user"]
    assert seen["body"]["max_tokens"] == 64
    # a caller who names no max_tokens: the gateway fills the one Anthropic requires
    out = vendors.chat.completions.create(
        model=vendor_anthropic.MODEL, messages=[{"role": "user", "content": "no limit"}])
    assert out.choices[0].message.content == "anthropic says: no limit"
    assert last_seen(imitations, "anthropic")["body"]["max_tokens"] >= 1
    stream = vendors.chat.completions.create(
        model=vendor_anthropic.MODEL, max_tokens=64, stream=True,
        messages=[{"role": "user", "content": "one two"}])
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "anthropic says: one two"
    assert last_seen(imitations, "anthropic")["body"]["stream"] is True
    with pytest.raises(openai.BadRequestError) as exc:
        vendors.chat.completions.create(model=vendor_anthropic.MODEL, max_tokens=64,
                                        messages=[{"role": "user", "content": FAIL}])
    assert exc.value.status_code == 400
    assert "anthropic refused: bad input" in exc.value.message


def test_anthropic_caller_to_gemini_with_a_tool(vendors, gateway, helpers, imitations):
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=helpers.KEY, max_retries=0)
    tools = [{"name": "lookup", "description": "look something up",
              "input_schema": TOOLS[0]["function"]["parameters"]}]
    first = [{"role": "user", "content": "use a tool weather in Oslo"}]
    msg = claude.messages.create(model=GEMINI, max_tokens=50, tools=tools, messages=first)
    assert msg.stop_reason == "tool_use"
    use = msg.content[-1]
    assert (use.type, use.name, use.input) == ("tool_use", "lookup", {"query": "weather in Oslo"})
    again = claude.messages.create(model=GEMINI, max_tokens=50, tools=tools, messages=first + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": "cloudy"}]}])
    assert again.content[0].text == "tool said: cloudy"
    sent = last_seen(imitations, "gemini")["body"]["contents"]
    assert sent[2] == {"role": "user", "parts": [{"functionResponse": {
        "name": "lookup", "response": {"output": "cloudy"}}}]}
    with claude.messages.stream(model=GEMINI, max_tokens=50,
                                messages=[{"role": "user", "content": "a b"}]) as s:
        assert s.get_final_message().content[0].text == "gemini says: a b"
    assert last_seen(imitations, "gemini")["path"].endswith(":streamGenerateContent")
