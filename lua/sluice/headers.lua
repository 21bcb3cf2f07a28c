-- Request headers most requests do not carry: X-Request-Id, traceparent, Prefer and
-- X-Sluice-Worker-Token. Reading a header by name from Lua costs ~700 instructions
-- (nginx hashes the name, then scans the headers); nginx's map
-- $sluice_rare_headers (nginx/nginx.conf.tmpl) looks all four up in C, so a request
-- with none of them reads one variable instead of four. An empty header counts as
-- absent, as the readers below take it.
local ngx_var = ngx.var

local _M = {}

-- Does the request carry any of the four? (sets ctx.rare_headers)
function _M.rare(ctx)
    local rare = ctx.rare_headers
    if rare == nil then
        rare = ngx_var.sluice_rare_headers ~= ""
        ctx.rare_headers = rare
    end
    return rare
end

return _M
