-- Anthropic Messages protocol (docs/anthropic.md).
--
-- Caller side: POST /v1/messages to a backend that does not speak it, as the internal
-- chat form (adapters/chat.lua; the conversion in adapters/anthropic_convert.lua):
-- decode, respond, and its stream events (emitter: adapters/anthropic_stream.lua,
-- driven by adapters/stream.lua). POST /v1/messages/count_tokens is answered by the
-- gateway (count_tokens).
--
-- Backend side (protocol "anthropic"): chat work of any caller (OpenAI chat,
-- Responses: the chat form) and the one text input of completion and predict
-- requests as a Messages request to POST /v1/messages (adapters/anthropic_request.lua);
-- the answer back as the internal response, the stream as internal events (events).
-- The backend's key goes as X-API-Key (nginx.conf.tmpl maps the credential that
-- sluice.config marks), with an anthropic-version when the caller sent none.
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")
local ac = require("sluice.adapters.anthropic_convert")
local to_anthropic = require("sluice.adapters.anthropic_request")
local stream = require("sluice.adapters.anthropic_stream")

local ngx = ngx
local ngx_var = ngx.var
local set_header = ngx.req.set_header
local type = type
local ipairs = ipairs
local pairs = pairs
local ceil = math.ceil

local VERSION = "2023-06-01"   -- anthropic-version sent when the caller sent none
local MESSAGES_PATH = "/v1/messages"

local _M = {
    emitter = stream,
    VERSION = VERSION,
}

-- ---- caller side ----------------------------------------------------------------

local function last_user_text(msgs)
    for i = #msgs, 1, -1 do
        local m = msgs[i]
        if m.role == "user" then
            return common.content_text(m.content) or ""
        end
    end
    return ""
end

-- Caller body -> chat-form internal request, or nil, message, param (a 400).
function _M.decode(endpoint, doc, model)
    local chat, err, param = ac.to_chat(doc)
    if not chat then
        return nil, err, param
    end
    local messages, tools, tool_choice = chat.messages, chat.tools, chat.tool_choice
    local origin = chat.origin
    chat.messages, chat.tools, chat.tool_choice, chat.origin = nil, nil, nil, nil
    chat.stream, chat.stream_options = nil, nil
    return { kind = endpoint.kind, chat = true, api = "anthropic", model = model,
             messages = messages, tools = tools, tool_choice = tools and tool_choice,
             origin = origin,
             params = chat, inputs = { last_user_text(messages) },
             stream = doc.stream == true, include_usage = true, meta = {} }
end

-- A backend's refusal names a chat-form field: the caller's own name for it, and the
-- message with it (stop -> stop_sequences, messages[N] -> the caller's messages[M]
-- or system: common.caller_path, with the request `ireq`; the same names are kept).
local OWN = { stop = "stop_sequences", user = "metadata.user_id",
              parallel_tool_calls = "tool_choice" }

function _M.own_param(param, msg, ireq)
    if ireq then
        param = common.caller_path(ireq, param, "messages", ac.call_path)
    end
    local own = OWN[param]
    if not own then
        return param, msg
    end
    if type(msg) == "string" and msg:sub(1, #param + 1) == param .. " " then
        msg = own .. msg:sub(#param + 1)
    end
    return own, msg
end

-- Internal response -> caller body, or nil, message (a tool call whose arguments do
-- not parse: the answer cannot be converted).
function _M.respond(ireq, ires)
    return ac.to_message(ireq, ires, stream.message_id())
end

-- POST /v1/messages/count_tokens: the gateway's estimate (sluice.tokens reserves
-- the same, a token per 4 bytes) of what the request would send.
function _M.count_tokens(doc)
    local bytes = 0
    for _, name in ipairs({ "system", "messages", "tools" }) do
        local v = doc[name]
        if v ~= nil then
            bytes = bytes + #(type(v) == "string" and v or cjson.encode(v) or "")
        end
    end
    return '{"input_tokens":' .. ceil(bytes / 4) .. "}\n"
end

-- ---- backend side ---------------------------------------------------------------

-- The headers an Anthropic backend needs besides its key.
function _M.headers()
    if not ngx_var.http_anthropic_version then
        set_header("anthropic-version", VERSION)
    end
end

-- Does the backend stream its answer? Chat work only; others are answered whole.
function _M.streams(ireq)
    return ireq.stream == true and ireq.kind == "chat" and ireq.messages ~= nil
end

-- The OpenAI chat body of a request's chat work: the chat form's pieces (or an OpenAI
-- chat caller's own body, its params), or the one text input of the other kinds.
local function chat_of(ireq, model_name)
    if ireq.kind == "chat" and type(ireq.messages) == "table" then
        local chat = {}
        for k, v in pairs(ireq.params) do
            chat[k] = v
        end
        chat.messages = ireq.messages
        chat.tools = ireq.tools
        chat.tool_choice = ireq.tools and ireq.tool_choice or nil
        chat.stream = ireq.stream == true or nil
        return chat
    end
    if #ireq.inputs ~= 1 or type(ireq.inputs[1]) ~= "string" then
        return nil, "model " .. model_name .. " is a chat model: send exactly one text input"
    end
    local chat = common.llm_params(ireq.params,
                                   { messages = { { role = "user", content = ireq.inputs[1] } } })
    chat.stream = nil   -- a predict-style caller is answered whole
    return chat
end

-- Internal request -> backend path and body, or nil, message, param (a 400).
function _M.request(ireq, _, model_name)
    _M.headers()
    local chat, err = chat_of(ireq, model_name)
    if not chat then
        return nil, err
    end
    local body, param
    body, err, param = to_anthropic.from_chat(chat, model_name, ireq.max_output)
    if not body then
        return nil, err, param
    end
    if not _M.streams(ireq) then
        body.stream = nil
    end
    return MESSAGES_PATH, body
end

function _M.response(doc)
    return ac.from_message(doc)
end

-- One event of the backend's stream -> internal events (adapters/anthropic_stream.lua).
_M.events = stream.events

-- Anthropic backends take tools (sluice.carry).
_M.tools = true

-- What of the chat form's params an Anthropic backend refuses (sluice.carry).
_M.refuses = to_anthropic.refuses

function _M.error_message(doc)
    local e = doc.error
    if type(e) == "table" and type(e.message) == "string" then
        return e.message
    end
    return nil
end

return _M
