-- The Anthropic Messages conversions (lua/sluice/adapters/anthropic_convert.lua,
-- anthropic.lua, anthropic_stream.lua): caller bodies into the chat form
-- (adapters/chat.lua) and back, chat work into Anthropic requests and Anthropic
-- answers back, and both sides of their streams as internal events.
local cjson = require("cjson.safe")
local ac = require("sluice.adapters.anthropic_convert")
local ar = require("sluice.adapters.anthropic_request")
local anthropic = require("sluice.adapters.anthropic")
local stream = require("sluice.adapters.anthropic_stream")
local chat_form = require("sluice.adapters.chat")
local responses_backend = require("sluice.adapters.responses_backend")

local T = {}

local function json(s)
    return assert(cjson.decode(s))
end

local function eq(a, b)
    if type(a) ~= "table" or type(b) ~= "table" then return a == b end
    for k, v in pairs(a) do if not eq(v, b[k]) then return false end end
    for k in pairs(b) do if a[k] == nil then return false end end
    return true
end

local function same(got, want, what)
    assert(eq(got, want), (what or "") .. ": got " .. tostring(cjson.encode(got)) .. ", want "
                          .. tostring(cjson.encode(want)))
end

local CHAT = { kind = "chat" }

function T.a_messages_request_becomes_a_chat_form_request()
    local doc = json([=[{"model": "claude", "max_tokens": 50, "system": "be brief",
        "stop_sequences": ["END"], "temperature": 0.3, "stream": true,
        "tools": [{"name": "lookup", "description": "d", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "messages": [
          {"role": "user", "content": [{"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}}]},
          {"role": "assistant", "content": [{"type": "text", "text": "calling"},
            {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": "x"}}]},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"},
            {"type": "text", "text": "thanks"}]}]}]=])
    local ireq = assert(anthropic.decode(CHAT, doc, "claude"))
    local params, msgs = ireq.params, ireq.messages
    assert(ireq.kind == "chat" and ireq.chat == true and ireq.stream == true)
    same(ireq.inputs, { "thanks" }, "inputs")
    same(msgs[1], { role = "system", content = "be brief" }, "system")
    same(msgs[2].content[2], { type = "image_url",
         image_url = { url = "data:image/png;base64,QUJD" } }, "image")
    local call = msgs[3].tool_calls[1]
    assert(msgs[3].content == "calling" and call.id == "t1")
    same(json(call["function"].arguments), { q = "x" }, "arguments")
    same(msgs[4], { role = "tool", tool_call_id = "t1", content = "42" }, "tool result")
    same(msgs[5], { role = "user", content = { { type = "text", text = "thanks" } } })
    assert(ireq.tool_choice == "required" and params.parallel_tool_calls == false)
    same(ireq.tools[1], { type = "function", ["function"] = {
        name = "lookup", description = "d", parameters = { type = "object" } } }, "tools")
    same(params.stop, { "END" }, "stop")
    assert(params.max_tokens == 50 and params.temperature == 0.3)
    assert(params.messages == nil and params.tools == nil and params.stream == nil)
end

function T.an_empty_required_list_is_left_out_of_tool_schemas()
    -- cjson would write [] back as {}: an empty `required` is the same as none
    local doc = json([=[{"messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f",
        "input_schema": {"type": "object", "required": [], "properties": {
            "required": {}, "o": {"type": "object", "required": [], "properties": {}}}}}]}]=])
    local ireq = assert(anthropic.decode(CHAT, doc, "m"))
    local p = ireq.tools[1]["function"].parameters
    assert(p.required == nil and p.properties.o.required == nil)
    same(p.properties.required, {}, "a property named required stays")
    local body = assert(ar.from_chat(json([=[{"messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"required": []}}}]}]=]), "m"))
    same(body.tools[1].input_schema, {})
end

function T.what_a_chat_body_cannot_carry_is_named()
    local _, err, param = anthropic.decode(CHAT, json([=[{"messages": [{"role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "none", "content": "x"}]}]}]=]), "m")
    assert(param == "messages[0].content[0].tool_use_id", param)
    assert(err:find("no earlier tool_use", 1, true), err)
    _, _, param = anthropic.decode(CHAT, json([=[{"messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "bash_20250124", "name": "bash"}]}]=]), "m")
    assert(param == "tools[0].type", param)
end

function T.a_chat_body_becomes_an_anthropic_request()
    local chat = json([=[{"model": "x", "stop": "END", "user": "u1", "stream": true,
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
        "messages": [{"role": "system", "content": "one"}, {"role": "developer", "content": "two"},
          {"role": "user", "content": [{"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}}]},
          {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":1}"}},
            {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": ""}}]},
          {"role": "tool", "tool_call_id": "c1", "content": "r1"},
          {"role": "tool", "tool_call_id": "c2", "content": "r2"}]}]=])
    local body = assert(ar.from_chat(chat, "claude", 77))
    assert(body.system == "one\n\ntwo" and body.max_tokens == 77 and body.model == "claude")
    same(body.stop_sequences, { "END" }, "stop")
    same(body.metadata, { user_id = "u1" })
    same(body.messages[1].content[2], { type = "image", source = {
         type = "base64", media_type = "image/jpeg", data = "QUJD" } }, "image")
    same(body.messages[2], { role = "assistant", content = {
         { type = "tool_use", id = "c1", name = "lookup", input = { q = 1 } },
         { type = "tool_use", id = "c2", name = "lookup", input = {} } } }, "tool calls")
    same(body.messages[3], { role = "user", content = {
         { type = "tool_result", tool_use_id = "c1", content = "r1" },
         { type = "tool_result", tool_use_id = "c2", content = "r2" } } }, "one user turn")
    same(body.tool_choice, { type = "tool", name = "lookup" })
    same(body.tools[1], { name = "lookup", input_schema = { type = "object" } })
    assert(body.stream == true)
end

function T.what_an_anthropic_backend_cannot_carry_is_named()
    local function param(extra)
        local chat = json('{"messages": [{"role": "user", "content": "hi"}]}')
        for k, v in pairs(extra) do chat[k] = v end
        return select(3, ar.from_chat(chat, "m"))
    end
    assert(param({ n = 2 }) == "n")
    assert(param({ temperature = 1.5 }) == "temperature")
    assert(param({ response_format = { type = "json_object" } }) == "response_format")
    assert(param({ messages = json('[{"role": "user", "content": [{"type": "input_audio"}]}]') })
           == "messages[0].content[0].type")
    assert(param({ messages = json([=[[{"role": "assistant", "tool_calls": [{"id": "c",
        "function": {"name": "f", "arguments": "[1]"}}]}]]=]) })
           == "messages[0].tool_calls[0].function.arguments")
    -- n = 1 and a plain temperature are fine; max_tokens defaults without a model limit
    local body = assert(ar.from_chat(json(
        '{"n": 1, "temperature": 1, "messages": [{"role": "user", "content": "x"}]}'), "m"))
    assert(body.max_tokens == 4096)
end

function T.an_anthropic_answer_becomes_the_internal_response()
    local ires = assert(ac.from_message(json([=[{"type": "message", "stop_reason": "tool_use",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                    {"type": "tool_use", "id": "t", "name": "f", "input": {"k": "v"}}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 3}}]=])))
    assert(ires.outputs[1] == "ab" and ires.finish == "tool_calls")
    assert(ires.tool_calls[1].id == "t" and ires.tool_calls[1].name == "f")
    same(json(ires.tool_calls[1].arguments), { k = "v" })
    same(ires.usage, { prompt_tokens = 13, completion_tokens = 5, total_tokens = 18,
                       prompt_tokens_details = { cached_tokens = 3 } }, "usage")
    ires = assert(ac.from_message(json('{"type": "message", "content": [], "stop_reason": "max_tokens"}')))
    assert(ires.finish == "length" and ires.outputs[1] == "")
end

function T.the_internal_response_becomes_an_anthropic_message()
    local ireq = { model = "m", inputs = { "a b" } }
    local msg = assert(ac.to_message(ireq, { outputs = { "" }, finish = "tool_calls",
        usage = { prompt_tokens = 4, completion_tokens = 2 },
        tool_calls = { { id = "c", name = "f", arguments = '{"x":1}' } } }, "msg_1"))
    assert(msg.stop_reason == "tool_use" and #msg.content == 1)
    same(msg.content[1], { type = "tool_use", id = "c", name = "f", input = { x = 1 } })
    same(msg.usage, { input_tokens = 4, output_tokens = 2 })
    msg = assert(ac.to_message(ireq, { outputs = { "hi there" }, finish = "length" }, "msg_2"))
    assert(msg.stop_reason == "max_tokens" and msg.content[1].text == "hi there")
    same(msg.usage, { input_tokens = 2, output_tokens = 2 }, "estimated usage")
    local none, err = ac.to_message(ireq, { outputs = { "" },
        tool_calls = { { id = "c", name = "f", arguments = "{oops" } } }, "m")
    assert(none == nil and err:find("not a JSON object", 1, true), err)
end

-- The events of a stream, as (name, data) pairs.
local function events(s)
    local out = {}
    for name, data in s:gmatch("event: ([%w_]+)\ndata: ([^\n]*)\n\n") do
        out[#out + 1] = { name = name, data = json(data) }
    end
    return out
end

-- The emitter's output for internal events `evs`, then its finish (or nil, error).
local function emit(conv, evs)
    local out = { stream.start(conv) }
    for _, ev in ipairs(evs) do
        local piece, err = stream.event(conv, ev)
        if not piece then
            return nil, err
        end
        out[#out + 1] = piece
    end
    local tail, err = stream.finish(conv)
    if not tail then
        return nil, err
    end
    out[#out + 1] = tail
    return table.concat(out)
end

local function conv_of()
    return { ireq = { model = "m", inputs = { "q" } } }
end

function T.internal_events_become_anthropic_events()
    local got = events(assert(emit(conv_of(), {
        { text = "he" }, { text = "llo" }, { call = 0, id = "c", name = "f", args = '{"a"' },
        { call = 0, args = ":1}" }, { finish = "tool_calls" },
        { usage = { prompt_tokens = 3, completion_tokens = 4 } } })))
    local names = {}
    for i, e in ipairs(got) do names[i] = e.name end
    same(names, { "message_start", "content_block_start", "content_block_delta",
                  "content_block_delta", "content_block_stop", "content_block_start",
                  "content_block_delta", "content_block_delta", "content_block_stop",
                  "message_delta", "message_stop" }, "order")
    assert(got[6].data.content_block.type == "tool_use" and got[6].data.index == 1)
    -- one input_json_delta per backend delta, as Anthropic streams them
    assert(got[7].data.delta.partial_json == '{"a"', got[7].data.delta.partial_json)
    assert(got[8].data.delta.partial_json == ":1}" and got[8].data.index == 1)
    assert(got[10].data.delta.stop_reason == "tool_use")
    same(got[10].data.usage, { input_tokens = 3, output_tokens = 4 })
end

function T.parallel_tool_calls_stream_as_blocks_of_their_own()
    local got = events(assert(emit(conv_of(), {
        { call = 0, id = "a", name = "f", args = "{}" },
        { call = 1, id = "b", name = "g", args = '{"x":' }, { call = 1, args = "2}" } })))
    local starts = {}
    for _, e in ipairs(got) do
        if e.name == "content_block_start" then
            starts[#starts + 1] = e.data.index .. e.data.content_block.id
        end
    end
    same(starts, { "0a", "1b" }, "blocks")
    -- interleaved (both heads first, then the pieces in turn): call 0 streams, call 1
    -- is held and sent in one delta once call 0's arguments are complete
    got = events(assert(emit(conv_of(), {
        { call = 0, id = "a", name = "f", args = "" }, { call = 1, id = "b", name = "g", args = "" },
        { call = 0, args = '{"q":' }, { call = 1, args = '{"r":' }, { call = 0, args = "1}" },
        { call = 1, args = "2}" } })))
    local seen = {}
    for _, e in ipairs(got) do
        local d = e.data
        if e.name == "content_block_start" then
            seen[#seen + 1] = "start " .. d.index .. d.content_block.id
        elseif e.name == "content_block_delta" then
            seen[#seen + 1] = d.index .. " " .. d.delta.partial_json
        elseif e.name == "content_block_stop" then
            seen[#seen + 1] = "stop " .. d.index
        end
    end
    same(seen, { "start 0a", '0 {"q":', "0 1}", "stop 0", "start 1b", '1 {"r":', "1 2}",
                 "stop 1" }, "interleaved calls")
    -- a delta for a call whose block has closed cannot be placed
    local _, err = emit(conv_of(), { { call = 0, id = "a", name = "f", args = "{}" },
                                     { call = 1, id = "b", name = "g", args = "{}" },
                                     { call = 0, args = " " }, { call = 0, args = "x" } })
    assert(err and err:find("interleaved", 1, true), err)
    -- an anthropic backend's two tool_use blocks: calls 0 and 1
    local bconv = {}
    for i, id in ipairs({ "t0", "t1" }) do
        local evs = stream.events({ type = "content_block_start", index = i, content_block = {
            type = "tool_use", id = id, name = "f", input = {} } }, bconv)
        assert(evs[1].call == i - 1 and evs[1].id == id and evs[1].name == "f")
    end
end

function T.broken_tool_arguments_fail_the_stream_both_ways()
    local _, err = emit(conv_of(), { { call = 0, id = "c", name = "f", args = '{"a":' } })
    assert(err and err:find("not a JSON object", 1, true), err)
    -- an anthropic backend's stream: checked when the block stops
    local bconv = {}
    assert(stream.events(json([=[{"type": "content_block_start", "index": 0,
        "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}}]=]), bconv))
    local evs = stream.events(json([=[{"type": "content_block_delta", "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": "{\"a\": "}}]=]), bconv)
    same(evs, { { call = 0, args = '{"a": ' } }, "argument delta")
    local none, ferr = stream.events(json('{"type": "content_block_stop", "index": 0}'), bconv)
    assert(none == nil and ferr:find("not a JSON object", 1, true), ferr)
end

function T.an_anthropic_backend_stream_becomes_internal_events()
    local conv = {}
    same(stream.events(json([=[{"type": "message_start", "message": {"usage": {"input_tokens": 9,
        "output_tokens": 1}}}]=]), conv), {}, "message_start")
    same(stream.events(json('{"type": "ping"}'), conv), {}, "ping")
    same(stream.events(json([=[{"type": "content_block_start", "index": 0,
        "content_block": {"type": "text", "text": ""}}]=]), conv), {}, "empty text block")
    same(stream.events(json([=[{"type": "content_block_delta", "index": 0,
        "delta": {"type": "text_delta", "text": "hi"}}]=]), conv), { { text = "hi" } }, "text")
    local evs = stream.events(json([=[{"type": "message_delta", "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": 6}}]=]), conv)
    same(evs, { { finish = "stop" },
                { usage = { prompt_tokens = 9, completion_tokens = 6, total_tokens = 15 } } })
    local none, err = stream.events(json(
        '{"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}'), conv)
    assert(none == nil and err:find("busy", 1, true), err)
end

function T.top_k_reaches_a_chat_backend_and_is_refused_by_a_responses_one()
    local ireq = assert(anthropic.decode(CHAT, json([=[{"max_tokens": 5, "top_k": 7,
        "messages": [{"role": "user", "content": "x"}]}]=]), "m"))
    local path, body = chat_form.request(ireq, "m")
    assert(path == "/v1/chat/completions" and body.top_k == 7 and body.max_tokens == 5)
    local none, err, param = responses_backend.request(ireq, nil, "m")
    assert(none == nil and param == "top_k", err)
end

function T.count_tokens_estimates_a_token_per_four_bytes()
    local doc = json('{"model": "m", "system": "12345678", "messages": [{"role": "user", "content": "x"}]}')
    local n = json(anthropic.count_tokens(doc)).input_tokens
    -- 8 bytes of system, 35 of the messages' JSON
    assert(n == math.ceil((8 + #cjson.encode(doc.messages)) / 4), n)
end

return T
