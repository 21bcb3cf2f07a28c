-- OpenAI chat body -> Anthropic Messages request, for a backend of protocol
-- `anthropic` (the pivot: adapters/anthropic_convert.lua). Whatever the Messages API
-- has no place for is refused, naming the param (docs/anthropic.md).
-- Pure Lua (cjson only): no ngx.
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")
local ac = require("sluice.adapters.anthropic_convert")

local type = type
local tostring = tostring
local ipairs = ipairs
local concat = table.concat
local str_match = string.match

local json_null = cjson.null
local decode = cjson.decode
local is_list = common.is_list
local content_text = common.content_text
local schema_of = ac.schema_of

local _M = {}

-- OpenAI fields an Anthropic backend has no place for: a 400 naming them.
local NO_PLACE = { "n", "logprobs", "top_logprobs", "logit_bias", "audio", "modalities",
                   "prediction" }
local DEFAULT_MAX_TOKENS = 4096   -- when neither the caller nor the model says

local function absent(v)
    return v == nil or v == json_null
end

local function image_block(url)
    if type(url) == "table" then
        url = url.url
    end
    if type(url) ~= "string" then
        return nil
    end
    local mt, data = str_match(url, "^data:([%w/+.-]+);base64,(.*)$")
    if mt then
        return { type = "image", source = { type = "base64", media_type = mt, data = data } }
    end
    return { type = "image", source = { type = "url", url = url } }
end

local function user_blocks(c, where)
    if type(c) == "string" then
        return c
    end
    if not is_list(c) then
        return nil, "content must be a string or an array of content parts", where
    end
    local out = {}
    for j, p in ipairs(c) do
        local t = type(p) == "table" and p.type
        if t == "text" then
            out[#out + 1] = { type = "text", text = p.text }
        elseif t == "image_url" then
            local b = image_block(p.image_url)
            if not b then
                return nil, "an image_url part needs a url", where .. "[" .. (j - 1) .. "].image_url"
            end
            out[#out + 1] = b
        else
            return nil, "an Anthropic-protocol backend takes no " .. tostring(t) .. " parts",
                   where .. "[" .. (j - 1) .. "].type"
        end
    end
    return out
end

local function assistant_blocks(m, i)
    local out = {}
    local text = content_text(m.content)
    if text and text ~= "" then
        out[1] = { type = "text", text = text }
    end
    if is_list(m.tool_calls) then
        for j, call in ipairs(m.tool_calls) do
            local f = type(call) == "table" and call["function"]
            local args = type(f) == "table" and f.arguments
            local input = type(args) == "string" and (args == "" and {} or decode(args))
            if type(input) ~= "table" or input[1] ~= nil then
                return nil, "tool call arguments must be a JSON object",
                       "messages[" .. (i - 1) .. "].tool_calls[" .. (j - 1) .. "].function.arguments"
            end
            out[#out + 1] = { type = "tool_use", id = call.id, name = f.name, input = input }
        end
    end
    return out
end

local ANTHROPIC_CHOICE = { auto = { type = "auto" }, required = { type = "any" },
                           none = { type = "none" } }

local function tools_of(chat, body)
    if is_list(chat.tools) then
        local tools = {}
        for i, t in ipairs(chat.tools) do
            local f = type(t) == "table" and t["function"]
            if t.type ~= "function" or type(f) ~= "table" then
                return nil, "only function tools reach an Anthropic-protocol backend",
                       "tools[" .. (i - 1) .. "].type"
            end
            local schema = f.parameters
            if type(schema) ~= "table" then
                schema = { type = "object", properties = {} }
            end
            tools[i] = { name = f.name, description = f.description,
                         input_schema = schema_of(schema, 1) }
        end
        body.tools = tools
    end
    local tc = chat.tool_choice
    if type(tc) == "string" then
        body.tool_choice = ANTHROPIC_CHOICE[tc]
    elseif type(tc) == "table" and type(tc["function"]) == "table" then
        body.tool_choice = { type = "tool", name = tc["function"].name }
    end
    if chat.parallel_tool_calls == false then
        body.tool_choice = body.tool_choice or { type = "auto" }
        body.tool_choice.disable_parallel_tool_use = true
    end
    return true
end

-- OpenAI chat body `chat` -> Anthropic body for model `model_name`; `max_output`
-- (the model's max_output_tokens) fills max_tokens when the caller set none.
-- The first of chat `params` (a chat body's top-level fields) an Anthropic backend has
-- no place for: its name and why; or nil. Also sluice.carry's, before limits count
-- the request.
function _M.refuses(params)
    for _, name in ipairs(NO_PLACE) do
        local v = params[name]
        if not absent(v) and v ~= false and not (name == "n" and v == 1) then
            return name, "an Anthropic-protocol backend cannot carry " .. name
        end
    end
    local rf = params.response_format
    if type(rf) == "table" and rf.type ~= "text" then
        return "response_format", "an Anthropic-protocol backend cannot carry response_format"
    end
    if type(params.temperature) == "number" and params.temperature > 1 then
        return "temperature", "an Anthropic-protocol backend takes temperature from 0 to 1"
    end
    return nil
end

function _M.from_chat(chat, model_name, max_output)
    local refused, why = _M.refuses(chat)
    if refused then
        return nil, why, refused
    end
    local system, msgs = {}, {}
    for i, m in ipairs(chat.messages) do
        local role = m.role
        local where = "messages[" .. (i - 1) .. "].content"
        if role == "system" or role == "developer" then
            system[#system + 1] = content_text(m.content) or ""
        elseif role == "user" then
            local c, err, param = user_blocks(m.content, where)
            if not c then return nil, err, param end
            msgs[#msgs + 1] = { role = "user", content = c }
        elseif role == "assistant" then
            local c, err, param = assistant_blocks(m, i)
            if not c then return nil, err, param end
            if c[1] then
                msgs[#msgs + 1] = { role = "assistant", content = c }
            end
        elseif role == "tool" then
            local block = { type = "tool_result", tool_use_id = m.tool_call_id,
                            content = content_text(m.content) or "" }
            local last = msgs[#msgs]
            if last and last.tool_results then   -- parallel results: one user turn
                last.content[#last.content + 1] = block
            else
                msgs[#msgs + 1] = { role = "user", content = { block }, tool_results = true }
            end
        else
            return nil, "an Anthropic-protocol backend takes no " .. tostring(role)
                        .. " messages", "messages[" .. (i - 1) .. "].role"
        end
    end
    for _, m in ipairs(msgs) do
        m.tool_results = nil
    end
    local max = chat.max_tokens
    if absent(max) then max = chat.max_completion_tokens end
    if absent(max) then max = max_output or DEFAULT_MAX_TOKENS end
    local body = { model = model_name, messages = msgs, max_tokens = max,
                   temperature = chat.temperature, top_p = chat.top_p, top_k = chat.top_k }
    if #system > 0 then
        body.system = concat(system, "\n\n")
    end
    local stop = chat.stop
    if type(stop) == "string" then
        body.stop_sequences = { stop }
    elseif is_list(stop) then
        body.stop_sequences = stop
    end
    if chat.stream == true then
        body.stream = true
    end
    if type(chat.user) == "string" then
        body.metadata = { user_id = chat.user }
    end
    local ok, err, param = tools_of(chat, body)
    if not ok then
        return nil, err, param
    end
    return body
end

return _M
