-- Backend protocol `openai_responses`: a backend that speaks the OpenAI Responses API
-- (POST /v1/responses). Responses callers reach it unchanged (endpoints.lua: native);
-- every other caller is converted here:
--
--   chat messages -> input items (system/developer/user/assistant messages with
--   input_text / input_image / input_file parts, function_call, function_call_output);
--   tools, tool_choice; max_tokens or max_completion_tokens -> max_output_tokens;
--   temperature, top_p, parallel_tool_calls, user, metadata; response_format ->
--   text.format; stream. The gateway's request is sent with store: false.
--   Other callers' one text input -> input.
--
-- Chat fields Responses has no place for (stop, n above 1, seed, logprobs, the
-- penalties, audio input, an Anthropic caller's top_k) are a 400 naming them.
-- Answers: output items -> text and tool calls, usage in chat's names; streams:
-- Responses' events -> internal events (adapters/chat.lua).
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")

local type = type
local ipairs = ipairs
local tostring = tostring
local concat = table.concat

local json_null = cjson.null

-- chat parameters with no Responses counterpart
local REFUSED = { "stop", "seed", "presence_penalty", "frequency_penalty", "logprobs",
                  "top_logprobs", "logit_bias", "audio", "modalities", "prediction",
                  "top_k" }

local _M = {}

local function present(v)
    return v ~= nil and v ~= json_null
end

local function parts_of(content, role, where)
    if type(content) == "string" then
        return content
    end
    if type(content) ~= "table" then
        return ""
    end
    local out, texts = {}, {}
    for i, p in ipairs(content) do
        local t = type(p) == "table" and p.type
        if t == "text" or t == "refusal" then
            local text = p.text or p.refusal
            texts[#texts + 1] = text
            out[i] = { type = role == "assistant" and "output_text" or "input_text", text = text }
        elseif t == "image_url" and role == "user" then
            local img = type(p.image_url) == "table" and p.image_url or { url = p.image_url }
            out[i] = { type = "input_image", image_url = img.url, detail = img.detail or "auto" }
        elseif t == "file" and role == "user" and type(p.file) == "table" then
            out[i] = { type = "input_file", file_data = p.file.file_data,
                       file_id = p.file.file_id, filename = p.file.filename }
        else
            return nil, where .. "[" .. (i - 1) .. "].type",
                   "a " .. tostring(t) .. " part cannot be sent to a Responses backend"
        end
    end
    if role ~= "user" then   -- text only: one string
        return concat(texts)
    end
    return out
end

-- chat messages -> Responses input items, or nil, param, message
local function input_of(messages)
    local items = {}
    for i, m in ipairs(messages) do
        local where = "messages[" .. (i - 1) .. "]"
        local role = m.role
        if role == "tool" then
            items[#items + 1] = { type = "function_call_output", call_id = m.tool_call_id,
                                  output = common.content_text(m.content) or "" }
        else
            if role == "function" then
                return nil, where .. ".role", "function messages are not supported; use tool"
            end
            local c = m.content
            if present(c) then
                local content, param, msg = parts_of(c, role, where .. ".content")
                if not content then
                    return nil, param, msg
                end
                if content ~= "" or role ~= "assistant" then
                    items[#items + 1] = { type = "message", role = role, content = content }
                end
            end
            if role == "assistant" and type(m.tool_calls) == "table" then
                for _, tc in ipairs(m.tool_calls) do
                    local f = type(tc) == "table" and tc["function"] or {}
                    items[#items + 1] = { type = "function_call", call_id = tc.id,
                                          name = f.name, arguments = f.arguments or "{}" }
                end
            end
        end
    end
    return items
end

local function tools_of(list)
    local tools = {}
    for i, t in ipairs(list) do
        local f = type(t) == "table" and t["function"] or {}
        tools[i] = { type = "function", name = f.name, description = f.description,
                     parameters = f.parameters, strict = f.strict }
    end
    return tools
end

local function tool_choice_of(tc)
    if type(tc) == "table" and type(tc["function"]) == "table" then
        return { type = "function", name = tc["function"].name }
    end
    return tc
end

local function format_of(rf)
    if type(rf) ~= "table" or rf.type == "text" then
        return nil
    end
    if rf.type == "json_schema" and type(rf.json_schema) == "table" then
        local js = rf.json_schema
        return { format = { type = "json_schema", name = js.name, schema = js.schema,
                            strict = js.strict, description = js.description } }
    end
    return { format = { type = rf.type } }
end

-- The first of chat-form `params` a Responses backend has no place for: its name and
-- why; or nil. Also sluice.carry's, before limits count the request.
function _M.refuses(params)
    for _, k in ipairs(REFUSED) do
        if present(params[k]) and params[k] ~= false then
            return k, k .. " cannot be sent to a Responses backend"
        end
    end
    if type(params.n) == "number" and params.n > 1 then
        return "n", "n above 1 cannot be sent to a Responses backend"
    end
    return nil
end

-- Internal request -> backend path and body, or nil, message, param (a 400).
function _M.request(ireq, _, model_name)
    local params = ireq.params
    local refused, why = _M.refuses(params)
    if refused then
        return nil, why, refused
    end
    local body = { model = model_name, store = false }
    if ireq.messages then
        local input, param, msg = input_of(ireq.messages)
        if not input then
            return nil, msg, param
        end
        body.input = input
    elseif #ireq.inputs == 1 and type(ireq.inputs[1]) == "string" then
        body.input = ireq.inputs[1]
    else
        return nil, "model " .. model_name .. " is a chat model: send exactly one text input"
    end
    local tools = ireq.tools or params.tools
    if type(tools) == "table" and tools[1] ~= nil then
        body.tools = tools_of(tools)
        body.tool_choice = tool_choice_of(ireq.tool_choice or params.tool_choice)
    end
    local max = params.max_completion_tokens
    if not present(max) then max = params.max_tokens end
    if not present(max) then max = params.max_length end
    body.max_output_tokens = present(max) and max or nil
    body.temperature = params.temperature
    body.top_p = params.top_p
    body.parallel_tool_calls = params.parallel_tool_calls
    body.user = params.user
    body.metadata = params.metadata
    body.text = format_of(params.response_format)
    if ireq.stream then
        body.stream = true
    end
    return "/v1/responses", body
end

-- Streams when the caller asked for a stream.
function _M.streams(ireq)
    return ireq.stream == true
end

local function usage_of(u)
    if type(u) ~= "table" or type(u.input_tokens) ~= "number" then
        return nil
    end
    local out = type(u.output_tokens) == "number" and u.output_tokens or 0
    return common.usage(u.input_tokens, out)
end

local function finish_of(doc, calls)
    local details = doc.incomplete_details
    if doc.status == "incomplete" and type(details) == "table"
       and details.reason == "max_output_tokens" then
        return "length"
    end
    return calls and "tool_calls" or "stop"
end

-- A Responses answer -> internal response, or nil, message.
function _M.response(doc)
    if doc.status == "failed" then
        return nil, _M.error_message(doc) or "the backend's response failed"
    end
    local output = doc.output
    if type(output) ~= "table" then
        return nil, "answer has no output"
    end
    local texts, calls = {}, nil
    for _, item in ipairs(output) do
        if type(item) == "table" then
            if item.type == "message" and type(item.content) == "table" then
                for _, p in ipairs(item.content) do
                    if type(p) == "table" and p.type == "output_text"
                       and type(p.text) == "string" then
                        texts[#texts + 1] = p.text
                    end
                end
            elseif item.type == "function_call" then
                calls = calls or {}
                calls[#calls + 1] = { id = item.call_id, name = item.name,
                                      arguments = item.arguments or "{}" }
            end
        end
    end
    return { outputs = { concat(texts) }, tool_calls = calls, finish = finish_of(doc, calls),
             usage = usage_of(doc.usage) }
end

-- One Responses stream event -> a list of internal events, or nil, message. The
-- output index of each function call is kept in conv.rcalls.
function _M.events(doc, conv)
    local t = doc.type
    if t == "response.output_text.delta" then
        return { { text = doc.delta } }
    elseif t == "response.output_item.added" then
        local item = doc.item
        if type(item) == "table" and item.type == "function_call" then
            local calls = conv.rcalls or { n = 0 }
            conv.rcalls = calls
            local n = calls.n
            calls.n = n + 1
            calls[doc.output_index or n] = n
            return { { call = n, id = item.call_id, name = item.name,
                       args = type(item.arguments) == "string" and item.arguments or "" } }
        end
    elseif t == "response.function_call_arguments.delta" then
        local n = conv.rcalls and conv.rcalls[doc.output_index]
        if not n then
            return nil, "arguments for a function call the stream never started"
        end
        return { { call = n, args = doc.delta } }
    elseif t == "response.completed" or t == "response.incomplete" then
        local r = type(doc.response) == "table" and doc.response or {}
        local evs = { { finish = finish_of(r, conv.rcalls ~= nil) } }
        local u = usage_of(r.usage)
        if u then
            evs[2] = { usage = u }
        end
        return evs
    elseif t == "response.failed" or t == "error" then
        return nil, _M.error_message(type(doc.response) == "table" and doc.response or doc)
                    or "the backend's stream failed"
    end
    return {}
end

function _M.error_message(doc)
    local e = doc.error
    if type(e) == "table" and type(e.message) == "string" then
        return e.message
    end
    if type(doc.message) == "string" then
        return doc.message
    end
    return type(e) == "string" and e or nil
end

-- Responses backends take tools (pairs.lua).
_M.tools = true

return _M
