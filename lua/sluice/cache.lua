-- Response cache for deterministic requests, in the sluice_cache shared dict.
--
--   access:      key = md5(scope, model, endpoint, canonical JSON of the body);
--                a fresh entry is answered right there (X-Cache-Status: HIT)
--   body_filter: the answer the caller got (after conversion) is kept, when the
--                status is 200 and it fits, for the model's TTL
--
-- Cacheable: the predict-style endpoints always, chat and completions only with
-- "temperature": 0 and no stream; a model with cache_ttl 0 never. Scope: the
-- consumer, unless the model says its answers may be shared. `Cache-Control:
-- no-cache` skips the lookup (BYPASS) and refreshes the entry.
--
-- Why not nginx's proxy_cache: its validity comes from proxy_cache_valid (static)
-- or the backend's own headers, so no per-model TTL; and it would store the
-- backend's answer, which a hit would then have to convert again.
local cjson = require("cjson.safe")
local metrics = require("sluice.metrics")

local ngx = ngx
local ngx_var = ngx.var
local ngx_header = ngx.header
local md5 = ngx.md5
local type = type
local pairs = pairs
local ipairs = ipairs
local next = next
local tostring = tostring
local tonumber = tonumber
local sort = table.sort
local concat = table.concat
local str_find = string.find
local str_sub = string.sub

local dict = ngx.shared.sluice_cache
local encode = cjson.encode

local MAX_ENTRY = 1024 * 1024      -- bytes; larger answers are not kept
-- fields that never change the answer (the envelope's request id is echoed back)
local IGNORED = { request_id = true }

metrics.register("sluice_cache_requests_total", "counter",
                 "Cacheable requests by outcome: HIT, MISS or BYPASS (no-cache).",
                 { "model", "status" })

local _M = {}

-- JSON with object keys sorted, so {"a":1,"b":2} and {"b":2,"a":1} share an entry.
local function canonical(v, out)
    if type(v) ~= "table" or v == cjson.null then
        out[#out + 1] = encode(v)
        return
    end
    local n = #v
    if n > 0 or next(v) == nil then
        out[#out + 1] = "["
        for i = 1, n do
            if i > 1 then out[#out + 1] = "," end
            canonical(v[i], out)
        end
        out[#out + 1] = "]"
        return
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    sort(keys)
    out[#out + 1] = "{"
    for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = "," end
        out[#out + 1] = encode(k)
        out[#out + 1] = ":"
        canonical(v[k], out)
    end
    out[#out + 1] = "}"
end

local function cacheable(endpoint, doc, model)
    if model.cache_ttl <= 0 then
        return false
    end
    local kind = endpoint.kind
    if kind == "predict" then
        return true
    end
    return (kind == "chat" or kind == "completion") and doc.temperature == 0
           and doc.stream ~= true
end

-- Access phase, before the request goes anywhere. A hit returns its content type
-- and answer (phases sends it); otherwise notes in ctx what body_filter should keep.
function _M.lookup(ctx, endpoint, doc, model, consumer)
    if not cacheable(endpoint, doc, model) then
        return
    end
    local body = {}
    for k, v in pairs(doc) do
        if not IGNORED[k] then body[k] = v end
    end
    local parts = { model.cache_shared and "*" or tostring(consumer.id), "\0", model.name,
                    "\0", endpoint.name, "\0" }
    canonical(body, parts)
    local key = md5(concat(parts))
    local c = ctx.cache
    c.key, c.ttl, c.status = key, model.cache_ttl, "MISS"

    local cc = ngx_var.http_cache_control
    if cc and str_find(cc:lower(), "no-cache", 1, true) then
        c.status = "BYPASS"
        return
    end
    local entry = dict:get(key)
    if not entry then
        return
    end
    c.status = "HIT"
    c.key = nil              -- nothing to store
    local nl = str_find(entry, "\n", 1, true)
    local answer = str_sub(entry, nl + 1)
    if doc.request_id ~= nil and endpoint.name == "unified" then
        local out = cjson.decode(answer)
        if out then
            out.request_id = doc.request_id
            answer = encode(out) .. "\n"
        end
    end
    return str_sub(entry, 1, nl - 1), answer
end

-- (A probe's plain ngx.ctx has no ctx.cache.)
function _M.header_filter(ctx)
    local c = ctx.cache
    local status = c and c.status
    if not status then
        return
    end
    ngx_header["X-Cache-Status"] = status
    c.logged = status      -- the access-log line's "cache"
    metrics.inc("sluice_cache_requests_total", 1, ctx.target.model_name or "", status)
    if c.key and ngx.status ~= 200 then
        c.key = nil
    end
    -- nginx may hand the body filter its eof only after the client has every byte;
    -- with a Content-Length the entry is stored as soon as that many bytes passed,
    -- so the caller's next request finds it.
    c.len = tonumber(ngx_header["Content-Length"])
end

function _M.body_filter(ctx)
    local c = ctx.cache
    if not c or not c.key then
        return
    end
    local data, eof = ngx.arg[1], ngx.arg[2]
    local size = c.size or 0
    if data and data ~= "" then
        size = size + #data
        c.size = size
        if size > MAX_ENTRY then
            c.key = nil
            return
        end
        c.parts = c.parts or {}
        c.parts[#c.parts + 1] = data
    end
    if eof or (c.len and size >= c.len) then
        if ctx.conv and ctx.conv.failed then    -- a 200 whose body is an error
            c.key = nil
            return
        end
        local ct = ngx_header["Content-Type"] or "application/json"
        dict:set(c.key, ct .. "\n" .. concat(c.parts or {}), c.ttl)
        c.key = nil
    end
end

return _M
