-- OpenAI protocol. Caller side: /v1/chat/completions, /v1/completions, /v1/embeddings
-- (their SSE chunks live in adapters/sse.lua). Backend side: a chat completion for
-- one text input from the predict-style endpoints.
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")
local chat = require("sluice.adapters.chat")

local ngx = ngx
local ngx_time = ngx.time
local type = type
local ipairs = ipairs

local json_null = cjson.null
local is_list = common.is_list
local text = common.text

local _M = {}

-- ---- caller side ----------------------------------------------------------------

local function last_user_text(messages)
    for i = #messages, 1, -1 do
        local m = messages[i]
        if m.role == "user" then
            return common.content_text(m.content)
        end
    end
    return nil
end

local function strings(v, field)
    if type(v) == "string" then
        return { v }
    end
    if is_list(v) then
        for _, s in ipairs(v) do
            if type(s) ~= "string" then
                return nil, 'field "' .. field .. '" must be a string or a list of strings'
            end
        end
        return v
    end
    return nil, 'field "' .. field .. '" must be a string or a list of strings'
end

-- Caller body -> internal request, or nil, message (a 400).
function _M.decode(endpoint, doc, model)
    local ireq = { kind = endpoint.kind, model = model, params = doc,
                   stream = doc.stream == true, meta = {} }
    local opts = doc.stream_options
    ireq.include_usage = type(opts) == "table" and opts.include_usage == true
    local err
    if endpoint.kind == "chat" then
        local messages = doc.messages
        if not is_list(messages) then
            return nil, 'field "messages" must be a non-empty list'
        end
        for _, m in ipairs(messages) do
            if type(m) ~= "table" or type(m.role) ~= "string" then
                return nil, 'every message needs a string "role"'
            end
        end
        local t = last_user_text(messages)
        if not t then
            return nil, "the conversation needs a user message with text content"
        end
        ireq.messages, ireq.inputs = messages, { t }
        ireq.tools, ireq.tool_choice = doc.tools, doc.tool_choice   -- (adapters/chat.lua)
    elseif endpoint.kind == "completion" then
        ireq.inputs, err = strings(doc.prompt, "prompt")
    else
        ireq.inputs, err = strings(doc.input, "input")
    end
    if not ireq.inputs then
        return nil, err
    end
    return ireq
end

local function response_id(ireq)
    return (ireq.kind == "chat" and "chatcmpl-" or "cmpl-") .. (ngx.var.sl_id or "")
end
_M.response_id = response_id

-- Internal response -> caller body (a table for cjson).
function _M.respond(ireq, ires)
    local choices = {}
    if ireq.kind == "chat" then
        choices[1] = { index = 0, finish_reason = ires.finish or "stop",
                       message = chat.message(ires) }
    else
        for i, out in ipairs(ires.outputs) do
            choices[i] = { index = i - 1, text = text(out), finish_reason = "stop",
                           logprobs = json_null }
        end
    end
    return {
        id = response_id(ireq),
        object = ireq.kind == "chat" and "chat.completion" or "text_completion",
        created = ngx_time(),
        model = ireq.model,
        choices = choices,
        usage = common.text_usage(ireq, ires),
    }
end

-- ---- backend side ---------------------------------------------------------------

-- Internal request -> backend path and body, or nil, message (a 400: impossible pair).
-- Only non-native kinds get here ("predict"), and the chat form of other caller APIs
-- (adapters/chat.lua); OpenAI callers reach an OpenAI backend unchanged.
function _M.request(ireq, _, model_name)
    if ireq.chat then
        return chat.request(ireq, model_name)
    end
    if #ireq.inputs ~= 1 or type(ireq.inputs[1]) ~= "string" then
        return nil, "model " .. model_name .. " is a chat model: send exactly one text input"
    end
    local body = { model = model_name,
                   messages = { { role = "user", content = ireq.inputs[1] } } }
    common.llm_params(ireq.params, body)
    return "/v1/chat/completions", body
end

function _M.response(doc, ireq)
    if ireq and ireq.chat then
        return chat.response(doc)
    end
    local choices = doc.choices
    if not is_list(choices) or type(choices[1]) ~= "table" then
        return nil, "answer has no choices"
    end
    local msg = choices[1].message
    local content = type(msg) == "table" and msg.content or choices[1].text
    if type(content) ~= "string" then
        return nil, "answer has no text content"
    end
    local usage = doc.usage
    if type(usage) ~= "table" or type(usage.prompt_tokens) ~= "number" then
        usage = nil
    end
    return { outputs = { content }, usage = usage }
end

-- A chat-form request streams when its caller asked (adapters/stream.lua).
function _M.streams(ireq)
    return ireq.chat == true and ireq.stream == true
end

function _M.events(doc)
    return chat.events(doc)
end

-- OpenAI backends take tools (sluice.carry).
_M.tools = true

function _M.error_message(doc)
    local e = doc.error
    if type(e) == "table" and type(e.message) == "string" then
        return e.message
    end
    if type(e) == "string" then
        return e
    end
    -- Mistral, vLLM and SGLang answer {"object": "error", "message": ...}
    return type(doc.message) == "string" and doc.message or nil
end

return _M
