-- Request ids: X-Request-Id as the caller sent it when it is a sane token, else one
-- made here (ctx.request_id and $sl_id, which proxy_set_header and the
-- log line read).
local rand = require("openssl.rand")
local headers = require("sluice.headers")

local ngx = ngx
local ngx_var = ngx.var
local re_find = ngx.re.find
local str_format = string.format
local str_byte = string.byte
local str_gsub = string.gsub

local REQUEST_ID = [[^[A-Za-z0-9._:-]{1,128}\z]]

local _M = {}

-- Request ids made here: 32 hex digits, 16 random ones drawn when the worker starts
-- and a 16-digit sequence number of the worker. Unique like nginx's $request_id (16
-- random bytes per request), which costs ~1.5 us of RAND_bytes per request; these
-- are not secrets, only unique.
local id_prefix
local id_seq = 0

local function hex_byte(c)
    return str_format("%02x", str_byte(c))
end

-- init_worker: a fresh draw per worker (after fork), so no two workers share a prefix.
function _M.init_worker()
    id_prefix = str_gsub(rand.bytes(8), ".", hex_byte)
end

local function new_request_id()
    if not id_prefix then   -- init_worker draws it; this only guards the order
        _M.init_worker()
    end
    id_seq = id_seq + 1
    return str_format("%s%016x", id_prefix, id_seq)   -- one string made, not two
end

-- Keep a valid incoming X-Request-Id, else a new one; sets ctx.request_id (and
-- ctx.request_id_made for a new one: sluice.trace takes it as the trace id) and
-- $sl_id (which proxy_set_header and the log line read).
function _M.take(ctx)
    local id = ctx.request_id
    if id then
        return id
    end
    id = headers.rare(ctx) and ngx_var.http_x_request_id
    if not id or not re_find(id, REQUEST_ID, "jo") then
        id = new_request_id()
        ctx.request_id_made = true
    end
    ctx.request_id = id
    ngx_var.sl_id = id
    return id
end

return _M
