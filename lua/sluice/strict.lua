-- Strict requests: the fields a caller's protocol defines are checked for type and
-- range before anything is forwarded, and the first bad one is named, as OpenAI
-- names it ("param": "temperature"). Fields this module does not know pass through
-- untouched: a backend may take more than the protocol says.
--
--   chat         messages (roles, content parts), tools, and the sampling fields
--   completions  prompt, and the sampling fields
--   embeddings   input
--   unified      the envelope (api_version, model_type, params.input, request_id)
--                and the sampling fields inside params
--   infer        input, params (an object) and the sampling fields inside it
--   responses    the Responses API's fields (sluice/strict_responses.lua)
--   messages, count_tokens   Anthropic's Messages API (sluice/strict_anthropic.lua)
--
-- Sampling fields: temperature 0..2, top_p 0..1, presence_penalty and
-- frequency_penalty -2..2, max_tokens and max_completion_tokens integers from 1 to
-- the model's max_output_tokens (DEFAULT_MAX_OUTPUT when the model sets none), n
-- 1..128, stop a string or up to 4 strings, stream true or false. JSON null is
-- taken as absent, as OpenAI takes it.
--
-- Pure Lua (sluice.json_values): tests/lua/test_strict.lua runs it under plain luajit.
local strict_responses = require("sluice.strict_responses")
local strict_anthropic = require("sluice.strict_anthropic")

local type = type
local ipairs = ipairs
local str_find = string.find


local DEFAULT_MAX_OUTPUT = 1048576   -- tokens, for a model without max_output_tokens
local MAX_N = 128
local MAX_STOP = 4

local ROLES = { system = true, user = true, assistant = true, tool = true,
                developer = true, ["function"] = true }
local ROLE_NAMES = "system, user, assistant, tool, developer"
local PART_TYPES = { text = true, image_url = true, input_audio = true, file = true,
                     refusal = true }
local PART_NAMES = "text, image_url, input_audio, file, refusal"
local TOKEN_FIELDS = { "max_tokens", "max_completion_tokens" }
local ENVELOPE_STRINGS = { "model", "model_type", "request_id" }

local jv = require("sluice.json_values")
local absent, is_int, is_array, is_object = jv.absent, jv.is_int, jv.is_array, jv.is_object
local range = jv.range

local _M = { DEFAULT_MAX_OUTPUT = DEFAULT_MAX_OUTPUT }

local function tokens(doc, name, limit, where)
    local v = doc[name]
    if not absent(v) and (not is_int(v) or v < 1 or v > limit) then
        return where .. name, name .. " must be an integer from 1 to " .. limit
                               .. " (this model's limit)"
    end
end

-- The sampling fields of `doc` (an OpenAI body, or an envelope's params); `where`
-- prefixes the param name ("params."). Returns nil, or param, message.
local function sampling(doc, limit, where)
    local p, msg = range(doc, "temperature", 0, 2, where)
    if p then return p, msg end
    p, msg = range(doc, "top_p", 0, 1, where)
    if p then return p, msg end
    p, msg = range(doc, "presence_penalty", -2, 2, where)
    if p then return p, msg end
    p, msg = range(doc, "frequency_penalty", -2, 2, where)
    if p then return p, msg end
    local p2, msg2 = tokens(doc, TOKEN_FIELDS[1], limit, where)
    if p2 then return p2, msg2 end
    p2, msg2 = tokens(doc, TOKEN_FIELDS[2], limit, where)
    if p2 then return p2, msg2 end
    local n = doc.n
    if not absent(n) and (not is_int(n) or n < 1 or n > MAX_N) then
        return where .. "n", "n must be an integer from 1 to " .. MAX_N
    end
    local stop = doc.stop
    if not absent(stop) and type(stop) ~= "string" then
        if not is_array(stop) or #stop > MAX_STOP then
            return where .. "stop", "stop must be a string or an array of up to "
                                    .. MAX_STOP .. " strings"
        end
        for i = 1, #stop do
            if type(stop[i]) ~= "string" then
                return where .. "stop", "stop must be a string or an array of up to "
                                        .. MAX_STOP .. " strings"
            end
        end
    end
    local stream = doc.stream
    if not absent(stream) and type(stream) ~= "boolean" then
        return where .. "stream", "stream must be true or false"
    end
    local so = doc.stream_options
    if not absent(so) and not is_object(so) then
        return where .. "stream_options", "stream_options must be an object"
    end
    return nil
end

local function content(c, role, where)
    if type(c) == "string" then
        return nil
    end
    if absent(c) then
        -- an assistant turn that only calls tools has no content
        if role == "assistant" then return nil end
        return where, "content is required for role " .. role
    end
    if not is_array(c) then
        return where, "content must be a string or an array of content parts"
    end
    for i = 1, #c do
        local part = c[i]
        -- the param's name is made only for an answer: not per part of every request
        if not is_object(part) then
            return where .. "[" .. (i - 1) .. "]", "a content part must be an object"
        end
        if not PART_TYPES[part.type] then
            return where .. "[" .. (i - 1) .. "].type",
                   "content part type must be one of " .. PART_NAMES
        end
        if part.type == "text" and type(part.text) ~= "string" then
            return where .. "[" .. (i - 1) .. "].text", "a text part needs a string text"
        end
    end
    return nil
end

local function messages(list)
    if not is_array(list) or #list == 0 then
        return "messages", "messages must be a non-empty array"
    end
    for i = 1, #list do
        local m = list[i]
        if not is_object(m) then
            return "messages[" .. (i - 1) .. "]", "a message must be an object"
        end
        if not ROLES[m.role] then
            return "messages[" .. (i - 1) .. "].role", "role must be one of " .. ROLE_NAMES
        end
        local c = m.content
        if type(c) ~= "string" then   -- the usual case needs no param name
            local p, msg = content(c, m.role, "messages[" .. (i - 1) .. "].content")
            if p then return p, msg end
        end
    end
    return nil
end

local function tools(list)
    if absent(list) then
        return nil
    end
    if not is_array(list) then
        return "tools", "tools must be an array of function definitions"
    end
    for i = 1, #list do
        local t = list[i]
        local where = "tools[" .. (i - 1) .. "]"
        if not is_object(t) or t.type ~= "function" then
            return where .. ".type", 'a tool must be {"type": "function", "function": {...}}'
        end
        local f = t["function"]
        if not is_object(f) then
            return where .. ".function", "a tool's function must be an object"
        end
        local name = f.name
        if type(name) ~= "string" or #name == 0 or #name > 64
           or str_find(name, "[^%w_-]") then
            return where .. ".function.name",
                   "a function name must be 1 to 64 letters, digits, _ or -"
        end
        if not absent(f.parameters) and not is_object(f.parameters) then
            return where .. ".function.parameters", "parameters must be a JSON Schema object"
        end
        if not absent(f.description) and type(f.description) ~= "string" then
            return where .. ".function.description", "description must be a string"
        end
    end
    return nil
end

-- A prompt or an input: a string, an array of strings, an array of token integers,
-- or an array of such arrays.
local function text_or_tokens(v, name, required)
    if absent(v) then
        if required then return name, name .. " is required" end
        return nil
    end
    if type(v) == "string" then
        return nil
    end
    local msg = name .. " must be a string, an array of strings or an array of token arrays"
    if not is_array(v) then
        return name, msg
    end
    for i = 1, #v do
        local e = v[i]
        if type(e) ~= "string" and not is_int(e) then
            if not is_array(e) then return name, msg end
            for j = 1, #e do
                if not is_int(e[j]) then return name, msg end
            end
        end
    end
    return nil
end

-- The model's output limit (the snapshot model's max_output_tokens), or the default.
function _M.limit(model)
    local m = model and model.max_output_tokens
    if is_int(m) and m >= 1 then
        return m
    end
    return DEFAULT_MAX_OUTPUT
end

-- The endpoints check() reads the body of (the others pass any body, even none).
local CHECKED = { chat = true, completions = true, embeddings = true, unified = true,
                  infer = true, responses = true, messages = true, count_tokens = true }

-- Does check() read the body of endpoint `endpoint_name`? (sluice.body: a body no step
-- reads is not decoded.)
function _M.checks(endpoint_name)
    return CHECKED[endpoint_name] == true
end

-- Checks the body `doc` of an endpoint named `endpoint_name` (sluice.endpoints) for a
-- model whose output limit is `limit`. Returns nil when it is fine, or the bad
-- param's name and a message.
function _M.check(endpoint_name, doc, limit)
    limit = limit or DEFAULT_MAX_OUTPUT
    if endpoint_name == "chat" then
        local p, msg = messages(doc.messages)
        if p then return p, msg end
        p, msg = tools(doc.tools)
        if p then return p, msg end
        return sampling(doc, limit, "")
    elseif endpoint_name == "completions" then
        local p, msg = text_or_tokens(doc.prompt, "prompt", false)
        if p then return p, msg end
        return sampling(doc, limit, "")
    elseif endpoint_name == "responses" then
        return strict_responses.check(doc, limit)
    elseif endpoint_name == "embeddings" then
        return text_or_tokens(doc.input, "input", true)
    elseif endpoint_name == "unified" then
        if doc.api_version ~= "1.0" then
            return "api_version", 'api_version must be "1.0"'
        end
        for _, name in ipairs(ENVELOPE_STRINGS) do
            local v = doc[name]
            if not absent(v) and type(v) ~= "string" then
                return name, name .. " must be a string"
            end
        end
        local params = doc.params
        if not is_object(params) then
            return "params", 'params must be an object with "input"'
        end
        if absent(params.input) then
            return "params.input", "params.input is required"
        end
        return sampling(params, limit, "params.")
    elseif endpoint_name == "messages" or endpoint_name == "count_tokens" then
        return strict_anthropic.check(doc, limit, endpoint_name == "count_tokens")
    elseif endpoint_name == "infer" then
        if absent(doc.input) then
            return "input", "input is required"
        end
        local params = doc.params
        if absent(params) then
            return nil
        end
        if not is_object(params) then
            return "params", "params must be an object"
        end
        return sampling(params, limit, "params.")
    end
    return nil
end

return _M
