-- Strict requests of the Anthropic Messages API (sluice/strict_anthropic.lua, through
-- sluice.strict's "messages" and "count_tokens"): good bodies pass, each bad field is
-- named as `param`.
local strict = require("sluice.strict")
local cjson = require("cjson.safe")

local T = {}

local function json(s)
    return assert(cjson.decode(s))
end

local function msgs(extra)
    local doc = json('{"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}')
    for k, v in pairs(extra or {}) do
        doc[k] = v
    end
    return doc
end

local function bad(doc, param, endpoint, limit)
    local p, msg = strict.check(endpoint or "messages", doc, limit)
    assert(p == param, "expected param " .. param .. ", got " .. tostring(p) .. ": " .. tostring(msg))
    assert(type(msg) == "string" and msg ~= "", "no message for " .. param)
end

local function good(doc, endpoint)
    local p, msg = strict.check(endpoint or "messages", doc)
    assert(p == nil, "refused " .. tostring(p) .. ": " .. tostring(msg))
end

function T.a_full_conversation_with_tools_passes()
    good(json([=[{"model": "m", "max_tokens": 100, "system": [{"type": "text", "text": "s"}],
        "temperature": 1, "top_p": 0.5, "top_k": 5, "stream": true, "stop_sequences": ["x"],
        "metadata": {"user_id": "u"}, "tool_choice": {"type": "tool", "name": "f"},
        "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}},
                  {"type": "web_search_20250305", "name": "web_search"}],
        "messages": [
          {"role": "user", "content": [{"type": "text", "text": "q"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]},
          {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
            "content": [{"type": "text", "text": "r"}], "is_error": false}]}]}]=]))
end

function T.max_tokens_is_required_and_bounded()
    local doc = msgs()
    doc.max_tokens = nil
    bad(doc, "max_tokens")
    bad(msgs({ max_tokens = 0 }), "max_tokens")
    bad(msgs({ max_tokens = 1.5 }), "max_tokens")
    bad(msgs({ max_tokens = 101 }), "max_tokens", "messages", 100)
    -- count_tokens takes none
    good(json('{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'), "count_tokens")
end

function T.unknown_blocks_and_misplaced_ones_are_named()
    bad(msgs({ messages = json('[{"role": "user", "content": [{"type": "video"}]}]') }),
        "messages[0].content[0].type")
    bad(msgs({ messages = json([=[[{"role": "user", "content": [
        {"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]]=]) }),
        "messages[0].content[0].type")
    bad(msgs({ messages = json('[{"role": "system", "content": "x"}]') }), "messages[0].role")
    bad(msgs({ messages = json('[]') }), "messages")
    bad(msgs({ messages = json('[{"role": "user", "content": [{"type": "text"}]}]') }),
        "messages[0].content[0].text")
end

function T.a_tool_result_must_answer_an_earlier_tool_use()
    bad(msgs({ messages = json([=[[{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "nobody", "content": "x"}]}]]=]) }),
        "messages[0].content[0].tool_use_id")
    -- a later tool_use does not count
    bad(msgs({ messages = json([=[[
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]]=]) }),
        "messages[0].content[0].tool_use_id")
end

function T.images_are_checked()
    local big = string.rep("A", math.ceil(5 * 1024 * 1024 / 3) * 4 + 4)
    local doc = msgs({ messages = { { role = "user", content = { { type = "image",
        source = { type = "base64", media_type = "image/png", data = big } } } } } })
    bad(doc, "messages[0].content[0].source.data")
    bad(msgs({ messages = json([=[[{"role": "user", "content": [{"type": "image",
        "source": {"type": "base64", "media_type": "image/bmp", "data": "AA"}}]}]]=]) }),
        "messages[0].content[0].source.media_type")
    bad(msgs({ messages = json([=[[{"role": "user", "content": [{"type": "image",
        "source": {"type": "file", "file_id": "f"}}]}]]=]) }),
        "messages[0].content[0].source.type")
end

function T.the_other_fields_are_typed()
    bad(msgs({ temperature = 1.5 }), "temperature")
    bad(msgs({ top_p = -1 }), "top_p")
    bad(msgs({ top_k = -1 }), "top_k")
    bad(msgs({ stream = "yes" }), "stream")
    bad(msgs({ stop_sequences = "x" }), "stop_sequences")
    bad(msgs({ system = 5 }), "system")
    bad(msgs({ system = json('[{"type": "image"}]') }), "system[0]")
    bad(msgs({ tools = json('[{"name": "bad name", "input_schema": {}}]') }), "tools[0].name")
    bad(msgs({ tools = json('[{"name": "f"}]') }), "tools[0].input_schema")
    bad(msgs({ tool_choice = json('{"type": "sometimes"}') }), "tool_choice")
    bad(msgs({ tool_choice = json('{"type": "tool"}') }), "tool_choice.name")
    bad(msgs({ metadata = "x" }), "metadata")
end

return T
