-- What access reads of every request, as ONE nginx variable: whether it carries one
-- of the request headers most requests do not carry (X-Request-Id, traceparent,
-- Prefer, X-Sluice-Worker-Token), its $request_uri and its Authorization header.
-- Reading a variable by name from Lua costs ~700 instructions (nginx hashes the name,
-- then, for a header, scans the headers); nginx's maps $sluice_rare_headers and
-- $sl_req (nginx/nginx.conf.tmpl) look them up in C, so a request
-- reads one variable instead of six. An empty header counts as absent, as the
-- readers below take it.
local fields = require("sluice.bytes").fields

local ngx_var = ngx.var

local _M = {}

-- Access, first thing: "<rare>\n<$request_uri>\n<$http_authorization>" split (sets
-- ctx.rare_headers, ctx.request_uri and ctx.authorization, nil when absent).
function _M.read(ctx)
    local rare, uri, authz = fields(ngx_var.sl_req)
    ctx.rare_headers = rare ~= nil
    ctx.request_uri, ctx.authorization = uri, authz
end

-- Does the request carry any of the four? (sets ctx.rare_headers, unless read() has)
function _M.rare(ctx)
    local rare = ctx.rare_headers
    if rare == nil then
        rare = ngx_var.sluice_rare_headers ~= ""
        ctx.rare_headers = rare
    end
    return rare
end

return _M
