-- Anthropic Messages protocol (docs/anthropic.md).
--
-- Caller side: POST /v1/messages, converted for a backend that does not speak it
-- through an OpenAI chat body (adapters/anthropic_convert.lua): decode, respond, and
-- its streams (adapters/anthropic_stream.lua: frames, synthesize, error_event).
-- POST /v1/messages/count_tokens is answered by the gateway (count_tokens).
--
-- Backend side (protocol "anthropic"): any chat, completion or predict request as a
-- Messages request to POST /v1/messages (adapters/anthropic_request.lua), the answer
-- and its stream back. The
-- backend's key goes as X-API-Key (nginx.conf.tmpl maps the credential that
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
local ceil = math.ceil

local VERSION = "2023-06-01"   -- anthropic-version sent when the caller sent none
local MESSAGES_PATH = "/v1/messages"

local _M = {
    frames = stream.frames,
    synthesize = stream.synthesize,
    error_event = stream.error_event,
    frame = stream.frame,
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

-- Caller body -> internal request (its params an OpenAI chat body), or nil,
-- message, param (a 400).
function _M.decode(endpoint, doc, model)
    local chat, err, param = ac.to_chat(doc)
    if not chat then
        return nil, err, param
    end
    chat.model = model
    return { kind = endpoint.kind, model = model, params = chat, messages = chat.messages,
             inputs = { last_user_text(chat.messages) }, stream = doc.stream == true,
             include_usage = true, meta = {} }
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

-- Internal request -> backend path and body, or nil, message, param (a 400).
function _M.request(ireq, _, model_name)
    _M.headers()
    local chat = ireq.params
    if ireq.kind ~= "chat" or type(ireq.messages) ~= "table" then
        if #ireq.inputs ~= 1 or type(ireq.inputs[1]) ~= "string" then
            return nil, "model " .. model_name .. " is a chat model: send exactly one text input"
        end
        chat = common.llm_params(ireq.params,
                                 { messages = { { role = "user", content = ireq.inputs[1] } } })
        chat.stream = nil   -- a predict-style caller is answered whole
    end
    local body, err, param = to_anthropic.from_chat(chat, model_name, ireq.max_output)
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

function _M.error_message(doc)
    local e = doc.error
    if type(e) == "table" and type(e.message) == "string" then
        return e.message
    end
    return nil
end

return _M
