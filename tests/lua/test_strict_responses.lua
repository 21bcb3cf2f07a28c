-- Strict requests for /v1/responses (sluice/strict_responses.lua, through
-- sluice/strict.lua): good bodies pass, and the first bad field is named.
local strict = require("sluice.strict")
local cjson = require("cjson.safe")

local T = {}

local function body(s)
    return assert(cjson.decode(s), s)
end

local function bad(s, param, limit)
    local p, msg = strict.check("responses", body(s), limit)
    assert(p == param, "expected param " .. param .. ", got " .. tostring(p) .. " for " .. s)
    assert(type(msg) == "string" and msg ~= "", "no message for " .. param)
end

local function good(s, limit)
    local p, msg = strict.check("responses", body(s), limit)
    assert(p == nil, "refused " .. tostring(p) .. ": " .. tostring(msg))
end

function T.valid_bodies_pass()
    assert(strict.checks("responses"))
    good([[{"model": "m", "input": "hi"}]])
    good([[{"model": "m", "input": "hi", "instructions": "be brief", "temperature": 0.5,
            "top_p": 1, "max_output_tokens": 64, "stream": true, "store": false,
            "metadata": {"a": "b"}, "tool_choice": "auto", "parallel_tool_calls": false,
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {}}},
            "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"},
                       "strict": true}, {"type": "web_search"}],
            "previous_response_id": null, "unknown": [1]}]])
    good([[{"model": "m", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "a"},
                                     {"type": "input_image", "image_url": "data:x"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "b"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "reasoning", "summary": []}]}]])
    -- an output for a call made in a stored response
    good([[{"model": "m", "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "c9", "output": "ok"}]}]])
end

function T.the_first_bad_field_is_named()
    bad([[{"model": "m"}]], "input")
    bad([[{"model": "m", "input": []}]], "input")
    bad([[{"model": "m", "input": [1]}]], "input[0]")
    bad([[{"model": "m", "input": [{"type": "audio"}]}]], "input[0].type")
    bad([[{"model": "m", "input": [{"role": "tool", "content": "x"}]}]], "input[0].role")
    bad([[{"model": "m", "input": [{"role": "user", "content": 5}]}]], "input[0].content")
    bad([[{"model": "m", "input": [{"role": "user", "content": [{"type": "video"}]}]}]],
        "input[0].content[0].type")
    bad([[{"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]}]],
        "input[0].content[0].image_url")
    bad([[{"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f"}]}]],
        "input[0].arguments")
    bad([[{"model": "m", "input": [{"type": "function_call_output", "call_id": "c",
                                    "output": "x"}]}]], "input[0].call_id")
    bad([[{"model": "m", "input": "x", "tools": "lookup"}]], "tools")
    bad([[{"model": "m", "input": "x", "tools": [{"name": "f"}]}]], "tools[0].type")
    bad([[{"model": "m", "input": "x", "tools": [{"type": "function", "name": "a.b"}]}]],
        "tools[0].name")
    bad([[{"model": "m", "input": "x", "tools": [{"type": "function", "name": "f",
                                                  "parameters": "x"}]}]], "tools[0].parameters")
    bad([[{"model": "m", "input": "x", "temperature": 2.5}]], "temperature")
    bad([[{"model": "m", "input": "x", "top_p": -1}]], "top_p")
    bad([[{"model": "m", "input": "x", "max_output_tokens": 1.5}]], "max_output_tokens")
    bad([[{"model": "m", "input": "x", "max_output_tokens": 101}]], "max_output_tokens", 100)
    bad([[{"model": "m", "input": "x", "stream": "yes"}]], "stream")
    bad([[{"model": "m", "input": "x", "instructions": 1}]], "instructions")
    bad([[{"model": "m", "input": "x", "metadata": {"a": 1}}]], "metadata")
    bad([[{"model": "m", "input": "x", "tool_choice": "sometimes"}]], "tool_choice")
    bad([[{"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}]], "text.format.type")
    bad([[{"model": "m", "input": "x", "text": {"format": {"type": "json_schema",
                                                           "name": "n"}}}]], "text.format.schema")
end

return T
