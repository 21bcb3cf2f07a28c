-- Credentials: `Authorization: Bearer <key or JWT>` or `X-API-Key: <key>`. API keys
-- are looked up by the sha256 hex of the full key in snapshot.keys; bearer values
-- shaped like a JWT (three dot-separated parts) go to sluice.jwt.
local digest = require("openssl.digest")
local jwt = require("sluice.jwt")
local has_space = require("sluice.bytes").has_space

local ngx = ngx
local ngx_var = ngx.var
local ngx_time = ngx.time
local re_match = ngx.re.match
local str_byte = string.byte
local str_sub = string.sub
local str_format = string.format
local str_gsub = string.gsub

local CACHE_SIZE = 2048   -- distinct keys per worker whose hash we remember
local MAX_KEY_LEN = 512   -- longer "keys" are refused without hashing

local _M = {}

-- key -> sha256 hex. Worker-local; a key's hash never changes, so no versioning. A
-- plain table (a lookup per request, where an LRU moves its entry every time),
-- started over when CACHE_SIZE keys are in it.
local hashes, n_hashes = {}, 0

local function hex_byte(c)
    return str_format("%02x", str_byte(c))
end

local function sha256_hex(s)
    local h = hashes[s]
    if h then
        return h
    end
    h = str_gsub(digest.new("sha256"):final(s), ".", hex_byte)
    if n_hashes >= CACHE_SIZE then
        hashes, n_hashes = {}, 0
    end
    hashes[s] = h
    n_hashes = n_hashes + 1
    return h
end
_M.sha256_hex = sha256_hex


-- The caller's key, or nil when none was given. `authz`: the Authorization header
-- (nil: none), as sluice.headers read it with the request's other facts.
function _M.credential(authz)
    if authz then
        -- the usual form, exactly "Bearer <key>", without the regex (same answer)
        if str_sub(authz, 1, 7) == "Bearer " then
            local key = str_sub(authz, 8)
            if key ~= "" and not has_space(key) then
                return key
            end
        end
        local m = re_match(authz, [[^\s*Bearer\s+(\S+)\s*$]], "joi")
        if m then
            return m[1]
        end
    end
    local key = ngx_var.http_x_api_key
    if key and key ~= "" then
        return key
    end
    return nil
end

-- `authz`: the Authorization header (ctx.req.authorization). Returns the consumer and
-- the request's attributes (the consumer's, with a JWT's claims merged over them);
-- or nil, http status, error type, message.
function _M.authenticate(snap, authz)
    local key = _M.credential(authz)
    if not key then
        return nil, 401, "unauthorized",
               "an API key or token is required (Authorization: Bearer <key>, or X-API-Key)"
    end
    if jwt.looks_like(key) then
        local consumer, attrs = jwt.authenticate(snap, key)
        if not consumer then
            return nil, 403, "forbidden", attrs
        end
        return consumer, attrs
    end
    if #key > MAX_KEY_LEN then
        return nil, 403, "forbidden", "invalid API key"
    end
    local rec = snap.keys[sha256_hex(key)]
    if not rec then
        return nil, 403, "forbidden", "invalid API key"
    end
    if rec.expires_at and rec.expires_at <= ngx_time() then
        return nil, 403, "forbidden", "API key has expired"
    end
    local consumer = snap.consumers[rec.consumer_id]
    if not consumer then
        return nil, 403, "forbidden", "invalid API key"
    end
    return consumer, consumer.attributes
end

function _M.allowed(consumer, model_name)
    return consumer.allowed == nil or consumer.allowed[model_name] == true
end

return _M
