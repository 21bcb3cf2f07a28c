-- The internal chat form, shared by the caller APIs that are not OpenAI chat
-- (Responses) and the backends that speak OpenAI chat or Responses.
--
-- A chat-form internal request (ireq.chat = true; see adapters/common.lua) carries
-- the conversation as OpenAI chat would:
--   messages     OpenAI chat messages: content a string or parts (text, image_url,
--                file); assistant turns with `tool_calls`; `tool` turns with
--                `tool_call_id`
--   tools        OpenAI chat tools ({type = "function", ["function"] = {...}}) or nil
--   tool_choice  OpenAI chat's form, or nil
--   params       max_tokens, temperature, top_p, parallel_tool_calls,
--                response_format, user, stop, top_k (chat's names; top_k from
--                Anthropic callers, which vLLM and SGLang read)
-- Its internal response adds to `outputs` (one text):
--   tool_calls   { { id, name, arguments }, ... } or nil
--   finish       "stop" | "length" | "tool_calls"
-- A stream is a list of internal events per backend frame (adapters/stream.lua):
--   { text = delta } | { call = i (0-based), id =, name =, args = delta }
--   | { finish = reason } | { usage = { prompt_tokens, completion_tokens, ... } }
--
-- This module: a chat-form request as an OpenAI chat backend's body, and that
-- backend's answer and stream frames back.
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")

local type = type
local ipairs = ipairs

local str_gsub = string.gsub

local json_null = cjson.null
-- cjson (Debian's lua-cjson: no empty_array_mt) writes an empty table as {}: an empty
-- list is this string until encode() writes it as []
local EMPTY = "\1[]"
local EMPTY_JSON = '"\\u0001%[%]"'

-- what a chat-form request's params may carry to a chat backend
local CHAT_PARAMS = { "temperature", "top_p", "max_tokens", "parallel_tool_calls",
                      "response_format", "user", "stop", "seed", "presence_penalty",
                      "frequency_penalty", "n", "top_k" }

local _M = {}

-- `t` as a JSON list, also when empty (for encode()).
function _M.array(t)
    if t == nil or t[1] == nil then
        return EMPTY
    end
    return t
end

-- JSON text of `v`, its empty lists (array()) as [].
function _M.encode(v)
    return (str_gsub(cjson.encode(v), EMPTY_JSON, "[]"))
end

-- Backend side: chat-form internal request -> the OpenAI chat body.
function _M.request(ireq, model_name)
    local body = { model = model_name, messages = ireq.messages }
    local params = ireq.params
    for _, k in ipairs(CHAT_PARAMS) do
        local v = params[k]
        if v ~= nil then
            body[k] = v
        end
    end
    if ireq.tools then
        body.tools = ireq.tools
        body.tool_choice = ireq.tool_choice
    else
        body.parallel_tool_calls = nil   -- chat APIs refuse it without tools
    end
    if ireq.stream then
        body.stream = true
        body.stream_options = { include_usage = true }
    end
    return "/v1/chat/completions", body
end

local FINISH = { stop = "stop", length = "length", tool_calls = "tool_calls",
                 function_call = "tool_calls", content_filter = "stop" }

local function usage_of(u)
    if type(u) == "table" and type(u.prompt_tokens) == "number" then
        return u
    end
    return nil
end

-- Backend side: an OpenAI chat answer -> internal response, or nil, message.
function _M.response(doc)
    local choices = doc.choices
    local choice = type(choices) == "table" and choices[1]
    if type(choice) ~= "table" or type(choice.message) ~= "table" then
        return nil, "answer has no choices"
    end
    local msg = choice.message
    local content = msg.content
    if content == nil or content == json_null then
        content = ""
    elseif type(content) ~= "string" then
        content = common.content_text(content) or ""
    end
    local calls
    if type(msg.tool_calls) == "table" and msg.tool_calls[1] ~= nil then
        calls = {}
        for i, tc in ipairs(msg.tool_calls) do
            local f = type(tc) == "table" and tc["function"]
            if type(f) ~= "table" or type(f.name) ~= "string" then
                return nil, "answer has a tool call without a function name"
            end
            local args = f.arguments
            if type(args) ~= "string" then
                args = args == nil and "{}" or cjson.encode(args)
            end
            if type(cjson.decode(args)) ~= "table" then
                return nil, "answer has tool call arguments that are not a JSON object"
            end
            calls[i] = { id = type(tc.id) == "string" and tc.id or "call_" .. i,
                         name = f.name, arguments = args }
        end
    end
    local finish = FINISH[choice.finish_reason] or (calls and "tool_calls" or "stop")
    return { outputs = { content }, tool_calls = calls, finish = finish,
             usage = usage_of(doc.usage) }
end

-- Backend side: one chat.completion.chunk -> a list of internal events, or nil,
-- message (a frame that says the stream failed).
function _M.events(doc)
    if doc.error ~= nil then
        local e = doc.error
        return nil, type(e) == "table" and type(e.message) == "string" and e.message
                    or "the backend's stream reported an error"
    end
    local evs = {}
    local choice = type(doc.choices) == "table" and doc.choices[1]
    if type(choice) == "table" then
        local delta = choice.delta
        if type(delta) == "table" then
            local c = delta.content
            if type(c) == "string" and c ~= "" then
                evs[#evs + 1] = { text = c }
            end
            if type(delta.tool_calls) == "table" then
                for _, tc in ipairs(delta.tool_calls) do
                    if type(tc) == "table" then
                        local f = type(tc["function"]) == "table" and tc["function"] or {}
                        evs[#evs + 1] = {
                            call = type(tc.index) == "number" and tc.index or 0,
                            id = type(tc.id) == "string" and tc.id or nil,
                            name = type(f.name) == "string" and f.name or nil,
                            args = type(f.arguments) == "string" and f.arguments or "" }
                    end
                end
            end
        end
        local fr = choice.finish_reason
        if type(fr) == "string" then
            evs[#evs + 1] = { finish = FINISH[fr] or "stop" }
        end
    end
    local u = usage_of(doc.usage)
    if u then
        evs[#evs + 1] = { usage = u }
    end
    return evs
end

-- Caller side (OpenAI chat callers): the assistant message of an internal response.
function _M.message(ires)
    local msg = { role = "assistant", content = common.text(ires.outputs[1]) }
    local calls = ires.tool_calls
    if calls then
        local list = {}
        for i, c in ipairs(calls) do
            list[i] = { id = c.id, type = "function",
                        ["function"] = { name = c.name, arguments = c.arguments } }
        end
        msg.tool_calls = list
        if msg.content == "" then
            msg.content = json_null
        end
    end
    return msg
end

-- The internal events of a whole internal response, in stream order.
function _M.events_of(ires)
    local evs = {}
    local text = common.text(ires.outputs[1])
    if text ~= "" then
        evs[1] = { text = text }
    end
    for i, c in ipairs(ires.tool_calls or {}) do
        evs[#evs + 1] = { call = i - 1, id = c.id, name = c.name, args = c.arguments }
    end
    evs[#evs + 1] = { finish = ires.finish or (ires.tool_calls and "tool_calls" or "stop") }
    if ires.usage then
        evs[#evs + 1] = { usage = ires.usage }
    end
    return evs
end

return _M
