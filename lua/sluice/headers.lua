-- What access reads of every request's headers, in one walk over nginx's list of
-- them: its Authorization header, and whether it carries one of the headers most
-- requests do not carry (X-Request-Id, traceparent, Prefer, X-Sluice-Worker-Token).
-- The walk goes through the FFI functions ngx.req.get_headers is made of (called in
-- sluice.ffi, which checks them at start), but makes no table and no string but the
-- Authorization value. Read as nginx variables ($http_authorization and a map over
-- the four others) they cost five scans of the list (~1,000 instructions) and a
-- map's evaluation (~1,300); the walk's C part reads ~130, its compiled loop a few
-- hundred (bench/README.md, issue 13, session 7). An empty header counts as absent,
-- as the readers below take it. $request_uri is read here too, as a variable.
local ffi = require("ffi")
local req_headers = require("sluice.ffi").req_headers   -- the private FFI, checked at start

-- libc's memcmp (declared here unless another module has: a second cdef would fail)
pcall(ffi.cdef, "int memcmp(const void *a, const void *b, size_t n);")

local C = ffi.C
local ffi_str = ffi.string
local ngx_var = ngx.var

local AUTHORIZATION = "authorization"
-- the rare ones by the length of their lower-case names
local RARE = { [12] = "x-request-id", [11] = "traceparent", [6] = "prefer",
               [21] = "x-sluice-worker-token" }

local _M = {}

-- Access, first thing: sets ctx.req.authorization (nil: none or empty),
-- ctx.req.rare_headers (true: one of the four above is there, not empty) and
-- ctx.req.request_uri.
function _M.read(ctx)
    local authz, rare = nil, false
    local list, n = req_headers()
    for i = 0, n - 1 do
        local h = list[i]
        local len, vlen = h.key.len, h.value.len
        if vlen > 0 then
            if len == 13 then
                -- nginx refuses a second Authorization: this is the one
                if authz == nil and C.memcmp(h.key.data, AUTHORIZATION, 13) == 0 then
                    authz = ffi_str(h.value.data, vlen)
                end
            elseif not rare then
                local name = RARE[len]
                rare = name ~= nil and C.memcmp(h.key.data, name, len) == 0
            end
        end
    end
    local req = ctx.req
    req.rare_headers, req.authorization = rare, authz
    req.request_uri = ngx_var.request_uri
end

-- Does the request carry any of the four? (sets ctx.req.rare_headers, unless read()
-- has; a probe's plain ngx.ctx has no ctx.req)
function _M.rare(ctx)
    local req = ctx.req
    local rare = req and req.rare_headers
    if rare == nil then
        rare = ngx_var.sluice_rare_headers ~= ""
        if req then
            req.rare_headers = rare
        end
    end
    return rare
end

return _M
