-- Anthropic Messages <-> OpenAI chat completions. An OpenAI chat body is the
-- gateway's pivot for chat work: the Anthropic caller's body becomes one (to_chat),
-- and any chat-kind request becomes an Anthropic body for an `anthropic` backend
-- (from_chat). Answers: an Anthropic message into the internal response
-- (from_message) and the internal response into an Anthropic message (to_message).
-- Internal response of chat work (adapters/common.lua):
--   { outputs = { text }, usage = OpenAI usage | nil,
--     finish = "stop" | "length" | "tool_calls" | "content_filter" | nil,
--     tool_calls = { { id, type = "function", ["function"] = { name, arguments } } } | nil }
-- Failures return nil, message, param (the param the caller or backend cannot carry).
-- Pure Lua (cjson only): no ngx.
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")

local type = type
local tostring = tostring
local ipairs = ipairs
local pairs = pairs
local next = next
local concat = table.concat
local str_match = string.match

local json_null = cjson.null
local encode = cjson.encode
local decode = cjson.decode
local is_list = common.is_list
local content_text = common.content_text

local _M = {}

-- stop_reason <-> finish_reason
local FINISH = { end_turn = "stop", stop_sequence = "stop", max_tokens = "length",
                 tool_use = "tool_calls", pause_turn = "stop", refusal = "content_filter" }
local STOP = { stop = "end_turn", length = "max_tokens", tool_calls = "tool_use",
               function_call = "tool_use", content_filter = "refusal" }
_M.FINISH, _M.STOP = FINISH, STOP

-- OpenAI fields an Anthropic backend has no place for: a 400 naming them.
local NO_PLACE = { "n", "logprobs", "top_logprobs", "logit_bias", "audio", "modalities",
                   "prediction" }
local DEFAULT_MAX_TOKENS = 4096   -- when neither the caller nor the model says

local function absent(v)
    return v == nil or v == json_null
end

-- The text of Anthropic content: a string or a list of blocks (text blocks only
-- count; nil when another kind is in it).
local function blocks_text(c, allow_other)
    if type(c) == "string" then
        return c
    end
    if absent(c) then
        return ""
    end
    local parts = {}
    for _, b in ipairs(c) do
        if type(b) == "table" and b.type == "text" and type(b.text) == "string" then
            parts[#parts + 1] = b.text
        elseif not allow_other then
            return nil
        end
    end
    return concat(parts)
end
_M.blocks_text = blocks_text

-- A tool's JSON Schema as it can be sent again: cjson decodes [] and {} alike and
-- writes both as {}, so an empty `required` list (the same as none) is left out
-- rather than sent as an object, at every depth (to MAX_DEPTH). Changes `schema`.
local MAX_DEPTH = 32
-- keywords whose value maps names to schemas (a property may be named "required")
local NAMED = { properties = true, patternProperties = true, ["$defs"] = true,
                definitions = true, dependentSchemas = true }
local function schema_of(schema, depth)
    if type(schema) ~= "table" or depth > MAX_DEPTH then
        return schema
    end
    for k, v in pairs(schema) do
        if type(v) == "table" then
            if k == "required" and next(v) == nil then
                schema[k] = nil
            elseif NAMED[k] then
                for _, child in pairs(v) do
                    schema_of(child, depth + 1)
                end
            else
                schema_of(v, depth + 1)   -- a schema, or a list of them
            end
        end
    end
    return schema
end

-- ---- caller side: Anthropic request -> OpenAI chat body -------------------------

local function image_part(src)
    if type(src) ~= "table" then
        return nil
    end
    if src.type == "base64" and type(src.media_type) == "string"
       and type(src.data) == "string" then
        return { type = "image_url",
                 image_url = { url = "data:" .. src.media_type .. ";base64," .. src.data } }
    elseif src.type == "url" and type(src.url) == "string" then
        return { type = "image_url", image_url = { url = src.url } }
    end
    return nil
end

local function assistant_message(c, where, seen)
    local texts, calls = {}, nil
    for j, b in ipairs(c) do
        local t = type(b) == "table" and b.type
        if t == "text" then
            texts[#texts + 1] = b.text
        elseif t == "tool_use" then
            calls = calls or {}
            seen[b.id] = true
            local input = b.input
            calls[#calls + 1] = { id = b.id, type = "function",
                                  ["function"] = { name = b.name,
                                                   arguments = absent(input) and "{}"
                                                               or encode(input) } }
        elseif t ~= "thinking" and t ~= "redacted_thinking" then   -- reasoning: dropped
            return nil, "an assistant turn cannot carry a " .. tostring(t) .. " block",
                   where .. "[" .. (j - 1) .. "].type"
        end
    end
    local msg = { role = "assistant", content = #texts > 0 and concat(texts) or json_null }
    msg.tool_calls = calls
    return msg
end

-- A user turn: its tool results first (OpenAI tool messages), then its other blocks.
local function user_messages(c, where, seen, out)
    local parts = {}
    for j, b in ipairs(c) do
        local t = type(b) == "table" and b.type
        local at = where .. "[" .. (j - 1) .. "]"
        if t == "text" then
            parts[#parts + 1] = { type = "text", text = b.text }
        elseif t == "image" then
            local p = image_part(b.source)
            if not p then
                return nil, "an image needs a base64 or url source", at .. ".source"
            end
            parts[#parts + 1] = p
        elseif t == "tool_result" then
            if not seen[b.tool_use_id] then
                return nil, "tool_result " .. tostring(b.tool_use_id)
                            .. " answers no earlier tool_use", at .. ".tool_use_id"
            end
            local text = blocks_text(b.content)
            if not text then
                return nil, "a tool result carried to this backend may hold only text",
                       at .. ".content"
            end
            if b.is_error == true then
                text = "error: " .. text
            end
            out[#out + 1] = { role = "tool", tool_call_id = b.tool_use_id, content = text }
        else
            return nil, "a user turn cannot carry a " .. tostring(t) .. " block", at .. ".type"
        end
    end
    if #parts > 0 then
        out[#out + 1] = { role = "user", content = parts }
    end
    return true
end

local CHOICE = { auto = "auto", any = "required", none = "none" }

-- Anthropic request `doc` -> OpenAI chat body.
function _M.to_chat(doc)
    local msgs, seen = {}, {}
    if not absent(doc.system) then
        local s = blocks_text(doc.system)
        if not s then
            return nil, "system must be a string or text blocks", "system"
        end
        msgs[1] = { role = "system", content = s }
    end
    if not is_list(doc.messages) then
        return nil, "messages must be a non-empty array", "messages"
    end
    for i, m in ipairs(doc.messages) do
        local where = "messages[" .. (i - 1) .. "].content"
        local c = type(m) == "table" and m.content
        if type(c) == "string" then
            msgs[#msgs + 1] = { role = m.role, content = c }
        elseif type(c) ~= "table" then
            return nil, "content must be a string or an array of blocks", where
        elseif m.role == "assistant" then
            local msg, err, param = assistant_message(c, where, seen)
            if not msg then return nil, err, param end
            msgs[#msgs + 1] = msg
        else
            local ok, err, param = user_messages(c, where, seen, msgs)
            if not ok then return nil, err, param end
        end
    end
    local chat = { messages = msgs, max_tokens = doc.max_tokens,
                   temperature = doc.temperature, top_p = doc.top_p, top_k = doc.top_k,
                   stop = doc.stop_sequences, stream = doc.stream }
    if doc.stream == true then
        chat.stream_options = { include_usage = true }
    end
    if type(doc.metadata) == "table" and type(doc.metadata.user_id) == "string" then
        chat.user = doc.metadata.user_id
    end
    if is_list(doc.tools) then
        local tools = {}
        for i, t in ipairs(doc.tools) do
            if t.type ~= nil and t.type ~= "custom" then
                -- Anthropic's server tools (web search, bash, ...) run at Anthropic
                return nil, "tool type " .. tostring(t.type) .. " runs only at Anthropic",
                       "tools[" .. (i - 1) .. "].type"
            end
            tools[i] = { type = "function",
                         ["function"] = { name = t.name, description = t.description,
                                          parameters = schema_of(t.input_schema, 1) } }
        end
        chat.tools = tools
    end
    local tc = doc.tool_choice
    if type(tc) == "table" then
        if tc.type == "tool" then
            chat.tool_choice = { type = "function", ["function"] = { name = tc.name } }
        else
            chat.tool_choice = CHOICE[tc.type]
        end
        if tc.disable_parallel_tool_use == true then
            chat.parallel_tool_calls = false
        end
    end
    return chat
end

-- ---- backend side: OpenAI chat body -> Anthropic request ------------------------

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
function _M.from_chat(chat, model_name, max_output)
    for _, name in ipairs(NO_PLACE) do
        local v = chat[name]
        if not absent(v) and v ~= false and not (name == "n" and v == 1) then
            return nil, "an Anthropic-protocol backend cannot carry " .. name, name
        end
    end
    local rf = chat.response_format
    if type(rf) == "table" and rf.type ~= "text" then
        return nil, "an Anthropic-protocol backend cannot carry response_format", "response_format"
    end
    if type(chat.temperature) == "number" and chat.temperature > 1 then
        return nil, "an Anthropic-protocol backend takes temperature from 0 to 1", "temperature"
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

-- ---- answers --------------------------------------------------------------------

-- Anthropic usage -> OpenAI usage (cache reads and writes are prompt tokens too;
-- the reads kept as prompt_tokens_details.cached_tokens).
function _M.usage(u, prompt)
    if type(u) ~= "table" then
        return nil
    end
    local read = type(u.cache_read_input_tokens) == "number" and u.cache_read_input_tokens or 0
    local made = type(u.cache_creation_input_tokens) == "number"
                 and u.cache_creation_input_tokens or 0
    local input = type(u.input_tokens) == "number" and u.input_tokens or prompt
    local output = u.output_tokens
    if type(input) ~= "number" or type(output) ~= "number" then
        return nil
    end
    local usage = common.usage(input + read + made, output)
    if read > 0 then
        usage.prompt_tokens_details = { cached_tokens = read }
    end
    return usage, input + read + made
end

-- An Anthropic message (a backend's answer) -> internal response.
function _M.from_message(doc)
    if not is_list(doc.content) and doc.type ~= "message" then
        return nil, "answer has no content"
    end
    local texts, calls = {}, nil
    for _, b in ipairs(type(doc.content) == "table" and doc.content or {}) do
        if b.type == "text" and type(b.text) == "string" then
            texts[#texts + 1] = b.text
        elseif b.type == "tool_use" then
            calls = calls or {}
            calls[#calls + 1] = { id = b.id, type = "function",
                                  ["function"] = { name = b.name,
                                                   arguments = encode(b.input or {}) } }
        end
    end
    return { outputs = { concat(texts) }, usage = _M.usage(doc.usage),
             finish = FINISH[doc.stop_reason] or "stop", tool_calls = calls }
end

-- The Anthropic usage of an internal response: the backend's, else estimated.
function _M.usage_of(ireq, ires)
    local u = common.text_usage(ireq, ires)
    return { input_tokens = u.prompt_tokens or 0, output_tokens = u.completion_tokens or 0 }
end

-- Internal response -> Anthropic message; nil, message when a tool call's arguments
-- are no JSON object.
function _M.to_message(ireq, ires, id)
    local content = {}
    local text = common.text(ires.outputs[1])
    if text ~= "" or not ires.tool_calls then
        content[1] = { type = "text", text = text }
    end
    for _, call in ipairs(ires.tool_calls or {}) do
        local f = call["function"] or {}
        local args = f.arguments
        local input = (args == nil or args == "") and {} or decode(args)
        if type(input) ~= "table" or input[1] ~= nil then
            return nil, "tool call " .. tostring(f.name) .. " has arguments that are not a JSON object"
        end
        content[#content + 1] = { type = "tool_use", id = call.id, name = f.name, input = input }
    end
    local stop = STOP[ires.finish] or "end_turn"
    if ires.tool_calls then
        stop = "tool_use"
    end
    return { id = id, type = "message", role = "assistant", model = ireq.model,
             content = content, stop_reason = stop, stop_sequence = json_null,
             usage = _M.usage_of(ireq, ires) }
end

return _M
