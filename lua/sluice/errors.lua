-- The one error shape that leaves the gateway (docs/contracts.md, "Error template"):
--   {"error": {"code": 404, "type": "not_found", "message": "...", "request_id": "..."}}
-- Anthropic callers (/v1/messages) get it in Anthropic's shape, the template's
-- fields kept (sluice/errors_anthropic.lua).
local cjson = require("cjson.safe")
local anthropic = require("sluice.errors_anthropic")

local ngx = ngx
local ngx_header = ngx.header
local ngx_print = ngx.print
local ngx_exit = ngx.exit
local pairs = pairs
local type = type
local tostring = tostring

local HTTP_OK = ngx.HTTP_OK

local _M = {}

-- status -> error type, for errors whose type is implied by the status alone
local TYPES = {
    [400] = "invalid_request",
    [401] = "unauthorized",
    [403] = "forbidden",
    [404] = "not_found",
    [405] = "method_not_allowed",
    [409] = "conflict",
    [413] = "payload_too_large",
    [422] = "validation_error",
    [429] = "rate_limited",
    [451] = "policy_violation",
    [500] = "internal_error",
    [502] = "backend_error",
    [503] = "backend_unavailable",
    [504] = "backend_timeout",
}
_M.TYPES = TYPES

-- Default messages for errors nginx raises itself (error_page).
local MESSAGES = {
    [413] = "request body is too large",
    [500] = "internal error",
    [502] = "the backend failed to answer",
    [503] = "no backend is available",
    [504] = "the backend did not answer in time",
}
_M.MESSAGES = MESSAGES

function _M.type_for(status)
    return TYPES[status] or (status >= 500 and "internal_error" or "invalid_request")
end

-- The JSON body of an error. `extra` fields (e.g. retry_after) join the error object.
function _M.body(status, err_type, message, extra)
    local ctx = ngx.ctx
    local e = {
        code = status,
        type = err_type or _M.type_for(status),
        message = message or MESSAGES[status] or "error",
        request_id = ctx.request_id or "",
    }
    if extra then
        for k, v in pairs(extra) do
            e[k] = v
        end
    end
    local doc = { error = e }
    if anthropic.caller(ctx) then
        doc = anthropic.shape(e)
    end
    local body, err = cjson.encode(doc)
    if not body then
        -- cannot happen with the fields above, but never send an empty error
        return '{"error":{"code":500,"type":"internal_error","message":"failed to encode error: '
               .. tostring(err) .. '"}}'
    end
    return body
end

-- Note the error template's type in the request's context (ctx.error_type: the log
-- line's) for an error body made in a body filter (a backend's own error answer).
function _M.note(ctx, err_type)
    ctx.error_type = err_type
end

-- Send the error template (status, headers, body) without ending the request, and
-- note its type in the request's context (ctx.error_type: the log line's). The
-- error page's way; everyone else uses exit().
function _M.send(status, err_type, message, extra)
    ngx.status = status
    ngx.ctx.error_type = err_type or _M.type_for(status)
    ngx_header["Content-Type"] = "application/json"
    ngx_header["Content-Length"] = nil   -- an intercepted answer's length is not ours
    if extra and extra.retry_after then
        ngx_header["Retry-After"] = extra.retry_after
    end
    ngx_print(_M.body(status, err_type, message, extra), "\n")
end

-- Send the error template and end the request. Usable in rewrite, access and
-- content phases. `extra.retry_after` also sets the Retry-After header.
function _M.exit(status, err_type, message, extra)
    if type(status) ~= "number" then
        error("status must be a number", 2)
    end
    _M.send(status, err_type, message, extra)
    -- the documented idiom: content already sent, so end with 200 (no error_page)
    return ngx_exit(HTTP_OK)
end

-- Send a JSON success body and end the request (internal API).
function _M.json(status, tbl)
    ngx.status = status
    ngx_header["Content-Type"] = "application/json"
    ngx_print(cjson.encode(tbl), "\n")
    return ngx_exit(HTTP_OK)
end

return _M
