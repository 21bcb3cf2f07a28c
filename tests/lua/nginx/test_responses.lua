-- The Responses API conversions: a Responses caller's body into the chat form and
-- back (adapters/responses.lua), its stream events (adapters/responses_stream.lua
-- driven by adapters/stream.lua), and the openai_responses backend's request,
-- answer and stream events (adapters/responses_backend.lua), tools both ways.
local cjson = require("cjson.safe")
local responses = require("sluice.adapters.responses")
local backend = require("sluice.adapters.responses_backend")
local chat = require("sluice.adapters.chat")
local openai = require("sluice.adapters.openai")
local stream = require("sluice.adapters.stream")

local T = {}

local function json(s)
    return assert(cjson.decode(s), s)
end

-- Responses SSE text -> list of { type, data }
local function sse_events(text)
    local out = {}
    for name, data in text:gmatch("event: ([^\n]+)\ndata: ([^\n]*)\n\n") do
        local ev = assert(cjson.decode(data), data)
        assert(ev.type == name, name)
        out[#out + 1] = ev
    end
    return out
end

local DOC = [=[{"model": "m", "instructions": "be brief", "max_output_tokens": 50,
  "temperature": 0.3, "metadata": {"k": "v"},
  "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
  "tool_choice": {"type": "function", "name": "lookup"},
  "text": {"format": {"type": "json_object"}},
  "input": [
    {"role": "user", "content": [{"type": "input_text", "text": "look "},
                                 {"type": "input_image", "image_url": "data:image/png;base64,x"}]},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{\"q\":1}"},
    {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "one"},
    {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
    {"type": "reasoning", "summary": []}]}]=]

function T.a_responses_body_becomes_the_chat_form()
    local ireq = assert(responses.decode(nil, json(DOC), "m"))
    assert(ireq.chat and ireq.kind == "chat" and ireq.api == "responses")
    local m = ireq.messages
    assert(#m == 5, #m)
    assert(m[1].role == "system" and m[1].content == "be brief")
    assert(m[2].role == "user" and m[2].content[1].text == "look "
           and m[2].content[2].image_url.url == "data:image/png;base64,x")
    -- two function_call items: one assistant turn with parallel calls
    assert(m[3].role == "assistant" and #m[3].tool_calls == 2)
    assert(m[3].tool_calls[1].id == "c1" and m[3].tool_calls[1]["function"].arguments == '{"q":1}')
    assert(m[4].role == "tool" and m[4].tool_call_id == "c1" and m[4].content == "one")
    assert(m[5].tool_call_id == "c2" and m[5].content == "two")
    assert(ireq.tools[1]["function"].name == "lookup")
    assert(ireq.tool_choice["function"].name == "lookup")
    assert(ireq.params.max_tokens == 50 and ireq.params.temperature == 0.3)
    assert(ireq.params.response_format.type == "json_object")
    assert(ireq.inputs[1] == "look ")
    -- and as an OpenAI chat backend's body
    local path, body = openai.request(ireq, nil, "m")
    assert(path == "/v1/chat/completions" and body.max_tokens == 50 and body.messages == m)
    assert(body.tools == ireq.tools and body.stream == nil)
end

function T.what_needs_a_responses_backend_is_named()
    local _, msg, param = responses.decode(nil, json([[{"input": "x",
        "previous_response_id": "resp_1"}]]), "m")
    assert(param == "previous_response_id" and msg:find("Responses"), msg)
    _, msg, param = responses.decode(nil, json([[{"input": [{"type": "item_reference",
        "id": "i"}]}]]), "m")
    assert(param == "input[0].type" and msg:find("item_reference"), param)
    _, msg, param = responses.decode(nil, json([[{"input": "x",
        "tools": [{"type": "file_search"}]}]]), "m")
    assert(param == "tools[0].type" and msg:find("file_search"), msg)
end

function T.a_chat_answer_with_tool_calls_becomes_function_call_items()
    local ireq = assert(responses.decode(nil, json([[{"input": "use a tool x",
        "metadata": {"k": "v"}}]]), "m"))
    local ires = assert(openai.response(json([[{"choices": [{"finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": [
          {"id": "call_1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
          {"id": "call_2", "type": "function", "function": {"name": "b", "arguments": "{\"x\":1}"}}]}}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}}]]), ireq))
    local out = json(responses.encode(responses.respond(ireq, ires)))
    assert(out.object == "response" and out.status == "completed", out.status)
    assert(#out.output == 2 and out.output[1].type == "function_call")
    assert(out.output[2].call_id == "call_2" and out.output[2].arguments == '{"x":1}')
    assert(out.usage.input_tokens == 4 and out.usage.output_tokens == 2
           and out.usage.total_tokens == 6)
    assert(out.metadata.k == "v" and out.store == false)
end

function T.text_answers_and_empty_lists()
    local ireq = assert(responses.decode(nil, json([[{"input": "hi"}]]), "m"))
    local text = responses.encode(responses.respond(ireq, { outputs = { "hello" },
                                                            finish = "length" }))
    assert(text:find('"tools":[]', 1, true) and text:find('"annotations":[]', 1, true), text)
    local out = json(text)
    assert(out.status == "incomplete" and out.incomplete_details.reason == "max_output_tokens")
    assert(out.output[1].content[1].text == "hello")
    assert(out.usage.input_tokens == 1 and out.usage.output_tokens == 1)   -- estimated
end

-- a chat backend's stream, frame by frame, as Responses' events
function T.chat_stream_frames_become_responses_events_in_order()
    local ireq = assert(responses.decode(nil, json([[{"input": "q", "stream": true}]]), "m"))
    local conv = { ireq = ireq, caller = responses, backend = openai, frames = true }
    local function frame(obj) return "data: " .. cjson.encode(obj) .. "\n\n" end
    local fail = function(msg) return '{"error":{"message":"' .. msg .. '"}}' end
    local text = stream.frames(conv, frame({ choices = { { delta = { role = "assistant",
        content = "" } } } }) .. frame({ choices = { { delta = { content = "Hi " } } } }), false, fail)
    text = text .. stream.frames(conv, frame({ choices = { { delta = { content = "there" } } } })
        .. frame({ choices = { { delta = { tool_calls = { { index = 0, id = "call_9",
            ["function"] = { name = "f", arguments = "" } } } } } } }), false, fail)
    -- a frame split across two reads
    local split = frame({ choices = { { delta = { tool_calls = { { index = 0,
        ["function"] = { arguments = '{"a":' } } } } } } })
    text = text .. stream.frames(conv, split:sub(1, 20), false, fail)
    text = text .. stream.frames(conv, split:sub(21) .. frame({ choices = { { delta = {
        tool_calls = { { index = 0, ["function"] = { arguments = "1}" } } } },
        finish_reason = "tool_calls" } } }) .. frame({ choices = {}, usage = {
        prompt_tokens = 3, completion_tokens = 5, total_tokens = 8 } }) .. "data: [DONE]\n\n",
        true, fail)
    local ev = sse_events(text)
    local types = {}
    for i, e in ipairs(ev) do
        types[i] = e.type
        assert(e.sequence_number == i - 1)
    end
    local want = { "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed" }
    assert(table.concat(types, ",") == table.concat(want, ","), table.concat(types, ","))
    assert(ev[7].text == "Hi there" and ev[13].arguments == '{"a":1}')
    local done = ev[#ev].response
    assert(done.status == "completed" and #done.output == 2)
    assert(done.output[2].call_id == "call_9" and done.output[2].name == "f")
    assert(done.usage.input_tokens == 3 and done.usage.output_tokens == 5)
end

function T.a_chat_body_to_a_responses_backend()
    local creq = assert(openai.decode({ kind = "chat" }, json([=[{"model": "m",
        "max_tokens": 9, "stream": true, "tools": [{"type": "function", "function": {
          "name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}}},
        "messages": [{"role": "system", "content": "s"},
          {"role": "user", "content": [{"type": "text", "text": "u"},
                                       {"type": "image_url", "image_url": {"url": "http://i"}}]},
          {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "f", "arguments": "{}"}}]},
          {"role": "tool", "tool_call_id": "c1", "content": "r"}]}]=]), "m"))
    local path, body = backend.request(creq, nil, "m")
    assert(path == "/v1/responses" and body.store == false and body.stream == true)
    assert(body.max_output_tokens == 9 and body.text.format.type == "json_schema")
    local input = body.input
    assert(#input == 4, #input)
    assert(input[1].role == "system" and input[1].content == "s")
    assert(input[2].content[1].type == "input_text" and input[2].content[2].type == "input_image"
           and input[2].content[2].image_url == "http://i")
    assert(input[3].type == "function_call" and input[3].call_id == "c1")
    assert(input[4].type == "function_call_output" and input[4].output == "r")
    assert(body.tools[1].name == "f" and body.tool_choice.name == "f")
    local _, msg, param = backend.request(assert(openai.decode({ kind = "chat" }, json([[{
        "stop": "x", "messages": [{"role": "user", "content": "u"}]}]]), "m")), nil, "m")
    assert(param == "stop" and msg, tostring(param))
end

function T.a_responses_answer_and_stream_become_chat()
    local ires = assert(backend.response(json([[{"status": "completed", "output": [
        {"type": "reasoning", "summary": []},
        {"type": "message", "content": [{"type": "output_text", "text": "a"},
                                        {"type": "output_text", "text": "b"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}],
        "usage": {"input_tokens": 2, "output_tokens": 3, "total_tokens": 5}}]])))
    assert(ires.outputs[1] == "ab" and ires.finish == "tool_calls")
    assert(ires.tool_calls[1].id == "c1" and ires.usage.total_tokens == 5)
    local msg = chat.message(ires)
    assert(msg.content == "ab" and msg.tool_calls[1]["function"].name == "f")
    local conv = {}
    local evs = assert(backend.events(json([[{"type": "response.output_item.added",
        "output_index": 1, "item": {"type": "function_call", "call_id": "c1", "name": "f"}}]]), conv))
    assert(evs[1].call == 0 and evs[1].id == "c1" and evs[1].name == "f")
    evs = assert(backend.events(json([[{"type": "response.function_call_arguments.delta",
        "output_index": 1, "delta": "{}"}]]), conv))
    assert(evs[1].call == 0 and evs[1].args == "{}")
    evs = assert(backend.events(json([[{"type": "response.completed", "response": {
        "status": "completed", "usage": {"input_tokens": 1, "output_tokens": 2}}}]]), conv))
    assert(evs[1].finish == "tool_calls" and evs[2].usage.total_tokens == 3)
    local _, err = backend.events(json([[{"type": "response.function_call_arguments.delta",
        "output_index": 7, "delta": "x"}]]), conv)
    assert(err and err:find("never started"), err)
    _, err = backend.events(json([[{"type": "response.failed", "response": {
        "error": {"message": "boom"}}}]]), conv)
    assert(err == "boom", err)
end

return T
