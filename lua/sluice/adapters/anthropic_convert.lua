-- Anthropic Messages <-> the internal chat form (adapters/chat.lua). The Anthropic
-- caller's body becomes a chat-form request (to_chat: OpenAI chat messages, tools and
-- tool_choice, chat's params), and any chat work becomes an Anthropic body for an
-- `anthropic` backend (adapters/anthropic_request.lua). Answers: an Anthropic message
-- into the internal response (from_message: tool calls as { id, name, arguments })
-- and the internal response into an Anthropic message (to_message).
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

local json_null = cjson.null
local encode = cjson.encode
local decode = cjson.decode
local is_list = common.is_list

local _M = {}

-- stop_reason <-> finish_reason
local FINISH = { end_turn = "stop", stop_sequence = "stop", max_tokens = "length",
                 tool_use = "tool_calls", pause_turn = "stop", refusal = "content_filter" }
local STOP = { stop = "end_turn", length = "max_tokens", tool_calls = "tool_use",
               function_call = "tool_use", content_filter = "refusal" }
_M.FINISH, _M.STOP = FINISH, STOP

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
_M.schema_of = schema_of

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

local function assistant_message(c, where, seen, origin)
    local texts, calls = {}, nil
    for j, b in ipairs(c) do
        local t = type(b) == "table" and b.type
        if t == "text" then
            texts[#texts + 1] = b.text
        elseif t == "tool_use" then
            calls = calls or {}
            seen[b.id] = true
            local input = b.input
            local call = { id = b.id, type = "function",
                           ["function"] = { name = b.name,
                                            arguments = absent(input) and "{}" or encode(input) } }
            calls[#calls + 1] = call
            origin[call] = j - 1
        elseif t ~= "thinking" and t ~= "redacted_thinking" then   -- reasoning: dropped
            return nil, "an assistant turn cannot carry a " .. tostring(t) .. " block",
                   where .. "[" .. (j - 1) .. "].type"
        end
    end
    local msg = { role = "assistant", content = #texts > 0 and concat(texts) or json_null }
    msg.tool_calls = calls
    return msg
end

-- A user turn (`turn`, 0-based): its tool results first (OpenAI tool messages), then
-- its other blocks; where each came from in `origin`.
local function user_messages(c, where, seen, out, origin, turn)
    local parts = {}
    for j, b in ipairs(c) do
        local t = type(b) == "table" and b.type
        local at = where .. "[" .. (j - 1) .. "]"
        local p
        if t == "text" then
            p = { type = "text", text = b.text }
        elseif t == "image" then
            p = image_part(b.source)
            if not p then
                return nil, "an image needs a base64 or url source", at .. ".source"
            end
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
            local m = { role = "tool", tool_call_id = b.tool_use_id, content = text }
            out[#out + 1] = m
            origin[m] = turn
        else
            return nil, "a user turn cannot carry a " .. tostring(t) .. " block", at .. ".type"
        end
        if p then
            parts[#parts + 1] = p
            origin[p] = j - 1
        end
    end
    if #parts > 0 then
        local m = { role = "user", content = parts }
        out[#out + 1] = m
        origin[m] = turn
    end
    return true
end

local CHOICE = { auto = "auto", any = "required", none = "none" }

-- Anthropic request `doc`'s generation parameters in chat's names (stop_sequences ->
-- stop, metadata.user_id -> user): the chat form's params, and what sluice.carry
-- checks against a backend before limits count the request.
function _M.params_of(doc)
    local params = { max_tokens = doc.max_tokens, temperature = doc.temperature,
                     top_p = doc.top_p, top_k = doc.top_k, stop = doc.stop_sequences }
    if type(doc.metadata) == "table" and type(doc.metadata.user_id) == "string" then
        params.user = doc.metadata.user_id
    end
    return params
end

-- A tool call of the chat form named in the caller's request (common.caller_path):
-- tool_use block `k` of turn `at`, its `input` for the call's arguments.
function _M.call_path(at, k, tail)
    return "messages[" .. at .. "].content[" .. k .. "]"
           .. (tail == ".function.arguments" and ".input" or "")
end

-- Anthropic request `doc` -> the chat form's pieces, as one OpenAI chat body
-- (messages, tools, tool_choice and chat's params; adapters/anthropic.lua splits it).
function _M.to_chat(doc)
    local msgs, seen, origin = {}, {}, {}
    if not absent(doc.system) then
        local s = blocks_text(doc.system)
        if not s then
            return nil, "system must be a string or text blocks", "system"
        end
        msgs[1] = { role = "system", content = s }
        origin[msgs[1]] = "system"
    end
    if not is_list(doc.messages) then
        return nil, "messages must be a non-empty array", "messages"
    end
    for i, m in ipairs(doc.messages) do
        local where = "messages[" .. (i - 1) .. "].content"
        local c = type(m) == "table" and m.content
        if type(c) == "string" then
            msgs[#msgs + 1] = { role = m.role, content = c }
            origin[msgs[#msgs]] = i - 1
        elseif type(c) ~= "table" then
            return nil, "content must be a string or an array of blocks", where
        elseif m.role == "assistant" then
            local msg, err, param = assistant_message(c, where, seen, origin)
            if not msg then return nil, err, param end
            msgs[#msgs + 1] = msg
            origin[msg] = i - 1
        else
            local ok, err, param = user_messages(c, where, seen, msgs, origin, i - 1)
            if not ok then return nil, err, param end
        end
    end
    local chat = _M.params_of(doc)
    chat.messages, chat.stream, chat.origin = msgs, doc.stream, origin
    if doc.stream == true then
        chat.stream_options = { include_usage = true }
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
            calls[#calls + 1] = { id = b.id, name = b.name, arguments = encode(b.input or {}) }
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
        local args = call.arguments
        local input = (args == nil or args == "") and {} or decode(args)
        if type(input) ~= "table" or input[1] ~= nil then
            return nil, "tool call " .. tostring(call.name)
                        .. " has arguments that are not a JSON object"
        end
        content[#content + 1] = { type = "tool_use", id = call.id, name = call.name,
                                  input = input }
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
