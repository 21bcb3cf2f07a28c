-- Helpers shared by the adapters: the internal form, JSON pointers, text and usage.
--
-- Internal request (built by a caller adapter's decode):
--   { kind = "chat" | "completion" | "embedding" | "predict", model = <name>,
--     inputs = { ... },      -- one entry per item; chat: the last user message's text
--     messages = { ... },    -- chat only, as the caller sent them
--     params = { ... },      -- temperature, max_tokens, threshold, ... (may be empty)
--     stream = bool, include_usage = bool, meta = { ... },   -- meta: caller echoes
--     origin = { [message or part or tool call] = where the caller had it } | nil }
-- Internal response (built by a backend adapter's response):
--   { outputs = { ... },     -- one entry per input (strings for text kinds)
--     usage = { prompt_tokens = n, completion_tokens = n } | nil }
-- The chat form of both (ireq.chat: messages with tool calls, tools, tool_choice;
-- ires.tool_calls, ires.finish) and its stream events: adapters/chat.lua.
local cjson = require("cjson.safe")

local type = type
local pairs = pairs
local ipairs = ipairs
local concat = table.concat
local tonumber = tonumber
local str_gsub = string.gsub
local str_find = string.find
local str_sub = string.sub
local str_match = string.match

local json_null = cjson.null

local _M = {}

-- Is `v` a non-empty Lua sequence (a JSON array as cjson decodes it)?
function _M.is_list(v)
    if type(v) ~= "table" or v[1] == nil then
        return false
    end
    local n = 0
    for _ in pairs(v) do
        n = n + 1
    end
    return n == #v
end

function _M.is_object(v)
    return type(v) == "table" and v[1] == nil
end

-- A scalar or a list, as a list.
function _M.as_list(v)
    if _M.is_list(v) then
        return v
    end
    return { v }
end

-- Text of one output: strings as they are, anything else as its JSON.
function _M.text(v)
    if type(v) == "string" then
        return v
    end
    if v == nil or v == json_null then
        return ""
    end
    return cjson.encode(v) or ""
end

-- The text of an OpenAI message's content: a string or a list of content parts.
function _M.content_text(content)
    if type(content) == "string" then
        return content
    end
    if type(content) == "table" then
        local parts = {}
        for _, p in ipairs(content) do
            if type(p) == "table" and type(p.text) == "string" then
                parts[#parts + 1] = p.text
            end
        end
        return concat(parts)
    end
    return nil
end

-- Whitespace-separated words: the usage estimate when a backend reports none
-- (the demo backends count tokens the same way).
function _M.words(s)
    local _, n = str_gsub(s, "%S+", "")
    return n
end

function _M.usage(prompt_tokens, completion_tokens)
    return { prompt_tokens = prompt_tokens, completion_tokens = completion_tokens,
             total_tokens = prompt_tokens + completion_tokens }
end

-- Usage of a text answer: the backend's own when it reported one, else estimated.
function _M.text_usage(ireq, ires)
    if ires.usage then
        return ires.usage
    end
    local prompt = 0
    for _, x in ipairs(ireq.inputs) do
        prompt = prompt + _M.words(_M.text(x))
    end
    local completion = 0
    for _, x in ipairs(ires.outputs) do
        completion = completion + _M.words(_M.text(x))
    end
    return _M.usage(prompt, completion)
end

-- RFC 6901 JSON pointer ("/result/text", "/choices/0/text"; "" is the document).
-- Array indexes are 0-based as in the RFC. Returns the value or nil.
function _M.pointer(doc, ptr)
    if ptr == "" then
        return doc
    end
    local v = doc
    local pos = 2
    while true do
        if type(v) ~= "table" then
            return nil
        end
        local stop = str_find(ptr, "/", pos, true)
        local token = str_sub(ptr, pos, stop and stop - 1 or nil)
        token = str_gsub(str_gsub(token, "~1", "/"), "~0", "~")
        local idx = tonumber(token)
        if idx and v[1] ~= nil then
            v = v[idx + 1]
        else
            v = v[token]
        end
        if v == nil or v == json_null then
            return nil
        end
        if not stop then
            return v
        end
        pos = stop + 1
    end
end

-- A backend adapter's param `messages[N]…` names the chat form's messages; a caller
-- whose messages were converted (Anthropic's `system` lifted, Responses' items) gets
-- the name of its own: ireq.origin (built by its decode, keyed by the chat form's
-- tables) holds where each message, content part and tool call came from: a 0-based
-- index in the caller's list `list`, or a name ("system", "instructions"). `call`
-- (the caller's) names a tool call: call(message index, call index, what follows).
-- Returns the caller's name, or `param` unchanged when it names no converted message.
function _M.caller_path(ireq, param, list, call)
    local origin = ireq and ireq.origin
    local n, rest = str_match(param or "", "^messages%[(%d+)%](.*)$")
    if not n or not origin then
        return param
    end
    local m = ireq.messages[tonumber(n) + 1]
    local at = m and origin[m]
    if at == nil then
        return param
    elseif type(at) == "string" then
        return at
    end
    local j, tail = str_match(rest, "^%.tool_calls%[(%d+)%](.*)$")
    if j then
        local tc = type(m.tool_calls) == "table" and m.tool_calls[tonumber(j) + 1]
        local k = tc and origin[tc]
        if k then
            return call(at, k, tail)
        end
        return list .. "[" .. at .. "]"
    end
    j, tail = str_match(rest, "^%.content%[(%d+)%](.*)$")
    if j then
        local part = type(m.content) == "table" and m.content[tonumber(j) + 1]
        local k = part and origin[part]
        if not k then
            return list .. "[" .. at .. "].content"
        end
        return list .. "[" .. at .. "].content[" .. k .. "]" .. tail
    end
    return list .. "[" .. at .. "]" .. rest
end

-- Copy of the numeric/string/boolean generation parameters an LLM backend knows.
local LLM_PARAMS = { "temperature", "top_p", "max_tokens", "stop", "seed",
                     "presence_penalty", "frequency_penalty", "n" }
_M.LLM_PARAMS = LLM_PARAMS

function _M.llm_params(params, into)
    for _, k in ipairs(LLM_PARAMS) do
        local v = params[k]
        if v ~= nil then
            into[k] = v
        end
    end
    if into.max_tokens == nil and params.max_length ~= nil then
        into.max_tokens = params.max_length
    end
    return into
end

return _M
