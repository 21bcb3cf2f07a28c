-- JWT bearer tokens: RS256 and ES256 verified with luaossl against the public keys of
-- the snapshot's `jwt` issuers. Nothing else is accepted: `alg: none`, HS* (a public
-- key used as an HMAC secret is the classic confusion attack) and every other alg are
-- refused before any key is touched.
--
--   token -> split on "." -> header (alg, kid) -> candidate keys (same alg, same kid
--   when the token names one) -> signature -> exp / nbf / iss / aud -> consumer
--
-- Verified tokens are remembered per worker until they expire or the snapshot
-- changes, so a revoked issuer stops working with the next push.
local cjson = require("cjson.safe")
local b64 = require("ngx.base64")
local pkey = require("openssl.pkey")
local digest = require("openssl.digest")
local lrucache = require("resty.lrucache")
local der = require("sluice.der")

local ngx = ngx
local ngx_log = ngx.log
local ngx_time = ngx.time
local WARN = ngx.WARN
local decode_base64url = b64.decode_base64url
local str_find = string.find
local str_sub = string.sub
local type = type
local pairs = pairs
local ipairs = ipairs
local pcall = pcall
local tostring = tostring
local math_min = math.min

local json_null = cjson.null

local MAX_TOKEN_LEN = 4096   -- nginx refuses header lines past 8k itself (494)
local LEEWAY = 30            -- seconds of clock skew allowed on exp and nbf
local CACHE_SIZE = 4096      -- verified tokens per worker
local ALGS = { RS256 = true, ES256 = true }

local _M = {}
_M.MAX_TOKEN_LEN = MAX_TOKEN_LEN

local cache = assert(lrucache.new(CACHE_SIZE))
local cache_version

-- Does `s` look like a compact JWS (three base64url parts)? API keys never do.
function _M.looks_like(s)
    local a = str_find(s, ".", 1, true)
    if not a then
        return false
    end
    local b = str_find(s, ".", a + 1, true)
    return b ~= nil and not str_find(s, ".", b + 1, true)
end

-- ES256 signatures are r || s; OpenSSL wants DER (sluice/der.lua).
local ecdsa_der = der.ecdsa

-- Snapshot issuers -> { keys = { {alg, kid, pkey, issuer} ... } }; called by
-- config.compile. Keys that luaossl cannot read are left out with a warning.
function _M.compile(issuers)
    local keys = {}
    if type(issuers) ~= "table" then
        return { keys = keys }
    end
    for _, iss in pairs(issuers) do
        local entry = {
            name = iss.name,
            issuer = iss.issuer ~= json_null and iss.issuer or nil,
            audience = iss.audience ~= json_null and iss.audience or nil,
            claim = iss.consumer_claim ~= json_null and iss.consumer_claim or "sub",
            expires_at = iss.expires_at ~= json_null and iss.expires_at or nil,
        }
        for _, k in ipairs(iss.keys) do
            local ok, key = pcall(pkey.new, k.pem, "PEM", "public")
            if ok and key then
                keys[#keys + 1] = { alg = k.alg, kid = k.kid ~= json_null and k.kid or nil,
                                    key = key, iss = entry }
            else
                ngx_log(WARN, "JWT issuer ", iss.name, ": unreadable key left out")
            end
        end
    end
    return { keys = keys }
end

-- Returns nil or a message naming the first bad field (config.validate).
function _M.validate(issuers)
    if issuers == nil then
        return nil
    end
    if type(issuers) ~= "table" then
        return "jwt: must be an object"
    end
    for id, iss in pairs(issuers) do
        local where = "jwt." .. tostring(id)
        if type(id) ~= "string" or type(iss) ~= "table" then return where .. ": must be an object" end
        if type(iss.keys) ~= "table" then return where .. ".keys: must be a list" end
        for i, k in ipairs(iss.keys) do
            if type(k) ~= "table" or not ALGS[k.alg] or type(k.pem) ~= "string" then
                return where .. ".keys[" .. i .. "]: needs alg RS256 or ES256 and a pem"
            end
        end
        for _, f in ipairs({ "issuer", "audience", "consumer_claim" }) do
            local v = iss[f]
            if v ~= nil and v ~= json_null and type(v) ~= "string" then
                return where .. "." .. f .. ": must be a string or null"
            end
        end
        local exp = iss.expires_at
        if exp ~= nil and exp ~= json_null and type(exp) ~= "number" then
            return where .. ".expires_at: must be null or unix seconds"
        end
    end
    return nil
end

local function decode_part(part)
    local raw = decode_base64url(part)
    if not raw then
        return nil
    end
    local obj = cjson.decode(raw)
    if type(obj) ~= "table" then
        return nil
    end
    return obj
end

local function audience_ok(aud, want)
    if type(aud) == "string" then
        return aud == want
    end
    if type(aud) == "table" then
        for _, a in ipairs(aud) do
            if a == want then
                return true
            end
        end
    end
    return false
end

local function verify_signature(key, alg, signing_input, sig)
    if alg == "ES256" then
        sig = ecdsa_der(sig)
        if not sig then
            return false
        end
    end
    -- luaossl raises on malformed signatures; that is a failed verification
    local ok, good = pcall(key.verify, key, sig, digest.new("sha256"):update(signing_input))
    return ok and good == true
end

local function claims_check(claims, iss, now)
    local exp, nbf = claims.exp, claims.nbf
    if exp ~= nil and type(exp) ~= "number" then
        return "token exp is not a number"
    end
    if nbf ~= nil and type(nbf) ~= "number" then
        return "token nbf is not a number"
    end
    if exp and exp + LEEWAY <= now then
        return "token has expired"
    end
    if nbf and nbf - LEEWAY > now then
        return "token is not valid yet"
    end
    if iss.issuer and claims.iss ~= iss.issuer then
        return "token issuer is not accepted"
    end
    if iss.audience and not audience_ok(claims.aud, iss.audience) then
        return "token audience is not accepted"
    end
    return nil
end

-- Verify `token` against `snap`. Returns consumer, attributes (claims other than
-- the consumer claim merged over the consumer's attributes); or nil, 403 message.
local function verify(snap, token)
    local a = str_find(token, ".", 1, true)
    local b = str_find(token, ".", a + 1, true)
    local header = decode_part(str_sub(token, 1, a - 1))
    if not header then
        return nil, "malformed token header"
    end
    local alg = header.alg
    if type(alg) ~= "string" then
        return nil, "token header has no alg"
    end
    if alg == "none" then
        return nil, "unsigned tokens (alg none) are not accepted"
    end
    if not ALGS[alg] then
        return nil, "token algorithm " .. str_sub(alg, 1, 16) .. " is not accepted (RS256, ES256)"
    end
    local kid = header.kid
    if kid ~= nil and type(kid) ~= "string" then
        return nil, "malformed token header"
    end
    local claims = decode_part(str_sub(token, a + 1, b - 1))
    if not claims then
        return nil, "malformed token claims"
    end
    local sig = decode_base64url(str_sub(token, b + 1))
    if not sig or sig == "" then
        return nil, "malformed token signature"
    end

    local now = ngx_time()
    local signing_input = str_sub(token, 1, b - 1)
    local iss, tried, expired = nil, 0, false
    for _, k in ipairs(snap.jwt.keys) do
        if k.alg == alg and (kid == nil or k.kid == kid) then
            if k.iss.expires_at and k.iss.expires_at <= now then
                expired = true
            else
                tried = tried + 1
                if verify_signature(k.key, alg, signing_input, sig) then
                    iss = k.iss
                    break
                end
            end
        end
    end
    if not iss then
        if tried == 0 then
            return nil, expired and "the key that signed this token has expired"
                        or "no key accepts this token"
        end
        return nil, "invalid token signature"
    end

    local err = claims_check(claims, iss, now)
    if err then
        return nil, err
    end
    local name = claims[iss.claim]
    if type(name) ~= "string" then
        return nil, "token has no " .. iss.claim .. " claim naming a consumer"
    end
    local consumer = snap.consumers_by_name[name]
    if not consumer then
        return nil, "token names no known consumer"
    end
    local attrs = {}
    for k, v in pairs(consumer.attributes) do
        attrs[k] = v
    end
    for k, v in pairs(claims) do
        local t = type(v)
        if k ~= iss.claim and (t == "string" or t == "number" or t == "boolean") then
            attrs[k] = v
        end
    end
    -- valid until the token or its issuer expires
    local untl = type(claims.exp) == "number" and claims.exp + LEEWAY or nil
    if iss.expires_at and (not untl or iss.expires_at < untl) then
        untl = iss.expires_at
    end
    return consumer, attrs, untl
end

-- Cached front of verify(): a token verified under this snapshot version is good
-- until it or its issuer expires, and for 5 minutes at most. Returns consumer,
-- attributes; or nil, message (403).
function _M.authenticate(snap, token)
    if #token > MAX_TOKEN_LEN then
        return nil, "token is too long"
    end
    if cache_version ~= snap.version then
        cache:flush_all()
        cache_version = snap.version
    end
    local hit = cache:get(token)
    if hit then
        return hit[1], hit[2]
    end
    local consumer, attrs, untl = verify(snap, token)
    if not consumer then
        return nil, attrs
    end
    local ttl = 300
    if untl then
        ttl = math_min(ttl, untl - ngx_time())
    end
    if ttl > 0 then
        cache:set(token, { consumer, attrs }, ttl)
    end
    return consumer, attrs
end

return _M
