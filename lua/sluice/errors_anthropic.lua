-- The error template in Anthropic's shape, for callers of the Messages API:
--   {"type": "error", "error": {"type": "not_found_error", "message": "...", "code": 404,
--    "sluice_type": "not_found", ...}, "request_id": "..."}
-- The Anthropic client reads `error.type` and `error.message` (and picks its error
-- class by the status); the template's own fields stay in `error` (its type as
-- `sluice_type`), so nothing an OpenAI caller would read is lost.
local ngx = ngx

local _M = {}

local PATHS = { ["/v1/messages"] = true, ["/v1/messages/count_tokens"] = true }

-- status -> Anthropic's error type
local TYPES = {
    [400] = "invalid_request_error", [401] = "authentication_error",
    [403] = "permission_error", [404] = "not_found_error", [413] = "request_too_large",
    [429] = "rate_limit_error", [503] = "overloaded_error", [529] = "overloaded_error",
}

-- Does the request `ctx` (sluice/context.lua: req.uri, written by sluice.endpoints; else
-- nginx's $uri, for an error nginx raised itself) speak the Messages API?
function _M.caller(ctx)
    local req = ctx.req
    return PATHS[req and req.uri or ngx.var.uri] == true
end

-- The template's error object `e` as Anthropic's error document.
function _M.shape(e)
    local status = e.code
    e.sluice_type = e.type
    e.type = TYPES[status] or (status >= 500 and "api_error" or "invalid_request_error")
    local id = e.request_id
    e.request_id = nil
    return { type = "error", error = e, request_id = id }
end

return _M
