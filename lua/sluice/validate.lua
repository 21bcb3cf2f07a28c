-- Snapshot validation: checks a decoded snapshot field by field before it is served
-- or stored (sluice.config push/init). Returns true, or nil and a message naming the
-- first bad field; each section module validates its own part.
local cjson = require("cjson.safe")
local plans = require("sluice.plans")
local jwt = require("sluice.jwt")
local content = require("sluice.content")
local mappings = require("sluice.mappings")
local breaker = require("sluice.breaker")
local ip_limit = require("sluice.ip_limit")
local splits = require("sluice.splits")
local admission = require("sluice.admission")
local realtime_plans = require("sluice.realtime_plans")
local media = require("sluice.media")
local x509 = require("openssl.x509")
local pkey = require("openssl.pkey")
local shape = require("sluice.shape")
local phi_scan = require("sluice.phi_scan")

local re_find = ngx.re.find
local type = type
local pairs = pairs
local ipairs = ipairs
local tostring = tostring
local floor = math.floor

local json_null = cjson.null

local PROTOCOLS = { openai = true, predict = true, kserve_v2 = true, tfserving = true,
                    vendor = true, openai_responses = true, gemini = true, anthropic = true,
                    openai_realtime = true }
local PROTOCOL_NAMES = "openai, predict, kserve_v2, tfserving, vendor, openai_responses, gemini, "
                       .. "anthropic, openai_realtime"
local SCHEMES = { http = true, https = true }

local _M = {}

local function is_int(v, min, max)
    return type(v) == "number" and floor(v) == v and v >= min and (not max or v <= max)
end

local function is_object(v)
    return type(v) == "table"
end

local function is_ip(s)
    return type(s) == "string"
        and (re_find(s, [[^\d{1,3}(\.\d{1,3}){3}\z]], "jo") ~= nil
             or re_find(s, [[^[0-9A-Fa-f:.]+\z]], "jo") ~= nil and s:find(":", 1, true) ~= nil)
end

local function is_pem(v, label)
    return type(v) == "string" and v:find("-----BEGIN " .. label, 1, true) ~= nil
end

-- backend.tls (docs/contracts.md): the name to verify, the trust set and its CA, the
-- client pair (both or neither)
local function validate_tls(t, where)
    if not is_object(t) then return where .. ": must be an object" end
    local name = t.server_name
    if type(name) ~= "string" or not re_find(name, [[^[A-Za-z0-9.-]{1,253}\z]], "jo") then
        return where .. ".server_name: must be a host name"
    end
    if t.verify ~= nil and type(t.verify) ~= "boolean" then
        return where .. ".verify: must be true or false"
    end
    local trust = t.trust
    if trust ~= nil and (type(trust) ~= "string"
                         or not re_find(trust, [[^(system|noverify|ca-[0-9a-f]{16})\z]], "jo")) then
        return where .. ".trust: must be system, noverify or ca-<16 hex digits>"
    end
    if trust ~= nil and (trust == "noverify") ~= (t.verify == false) then
        return where .. ".trust: noverify exactly when verify is false"
    end
    if trust ~= nil and trust:sub(1, 3) == "ca-" and not is_pem(t.ca, "CERTIFICATE") then
        return where .. ".ca: a ca-* trust needs the CA's PEM"
    end
    if (t.client_cert == nil) ~= (t.client_key == nil) then
        return where .. ".client_key: client_cert and client_key come together"
    end
    if t.client_cert ~= nil then
        -- nginx 1.22 writes a data: key it cannot use into its error log, whole: a
        -- pair that would not load is refused here, naming the field, never the PEM
        local ok, cert = pcall(x509.new, t.client_cert, "PEM")
        if not ok or type(t.client_cert) ~= "string" then
            return where .. ".client_cert: must be a PEM certificate"
        end
        local kok, key = pcall(pkey.new, t.client_key, "PEM")
        if not kok or type(t.client_key) ~= "string" or not is_pem(t.client_key, "") then
            return where .. ".client_key: must be an unencrypted PEM private key"
        end
        if cert:getPublicKey():toPEM("public") ~= key:toPEM("public") then
            return where .. ".client_key: is not the key of client_cert"
        end
    end
    if t.ca ~= nil and not (is_pem(t.ca, "CERTIFICATE") and pcall(x509.new, t.ca, "PEM")) then
        return where .. ".ca: must be PEM certificates"
    end
    return nil
end

local function validate_backend(b, where, maps)
    if not is_object(b) then return where .. ": must be an object" end
    if b.id == nil then return where .. ".id: is required" end
    if not PROTOCOLS[b.protocol] then
        return where .. ".protocol: must be one of " .. PROTOCOL_NAMES
    end
    if b.protocol == "vendor" and (type(b.mapping) ~= "string" or not maps[b.mapping]) then
        return where .. ".mapping: a vendor backend needs a mapping of the snapshot"
    end
    if b.scheme ~= nil and not SCHEMES[b.scheme] then
        return where .. ".scheme: must be http or https"
    end
    if b.scheme == "https" then
        local terr = validate_tls(b.tls, where .. ".tls")
        if terr then return terr end
    elseif b.tls ~= nil then
        return where .. ".tls: only https backends have TLS settings"
    end
    if not is_ip(b.host) then return where .. ".host: must be an IP address" end
    if not is_int(b.port, 1, 65535) then return where .. ".port: must be an integer in 1..65535" end
    if b.host_header ~= nil and (type(b.host_header) ~= "string" or b.host_header == "") then
        return where .. ".host_header: must be a non-empty string"
    end
    if b.base_path ~= nil and b.base_path ~= ""
       and (type(b.base_path) ~= "string" or b.base_path:sub(1, 1) ~= "/") then
        return where .. ".base_path: must be empty or start with /"
    end
    if not is_int(b.weight, 0) then return where .. ".weight: must be an integer >= 0" end
    if b.auth_header ~= nil and (type(b.auth_header) ~= "string" or b.auth_header == ""
                                 or re_find(b.auth_header, [=[[\x00-\x1f\x7f]]=], "jo")) then
        return where .. ".auth_header: must be a non-empty single-line string"
    end
    return shape.validate(b, where)   -- a hosted vendor's headers, paths and query
end

-- Returns true, or nil and a message naming the first bad field.
function _M.snapshot(s)
    if not is_object(s) then return nil, "snapshot must be a JSON object" end
    if not is_int(s.version, 1, 2 ^ 53) then return nil, "version: must be an integer >= 1" end
    for _, section in ipairs({ "models", "consumers", "keys" }) do
        if not is_object(s[section]) then return nil, section .. ": must be an object" end
    end
    local bok, berr = breaker.validate(s.breaker)
    if not bok then return nil, berr end
    local merr = mappings.validate(s.mappings) or ip_limit.validate(s.ip_limit)
    if merr then return nil, merr end
    local maps = s.mappings or {}
    for name, m in pairs(s.models) do
        local where = "models." .. tostring(name)
        -- cjson reads [] and {} alike; a non-empty list shows as number keys
        if type(name) ~= "string" then return nil, "models: must be an object" end
        if not is_object(m) then return nil, where .. ": must be an object" end
        if m.name ~= nil and m.name ~= name then return nil, where .. ".name: must equal its key" end
        if not is_int(m.timeout_ms, 1) then return nil, where .. ".timeout_ms: must be an integer >= 1" end
        local fb = m.fallback_model
        if fb ~= nil and fb ~= json_null and (type(fb) ~= "string" or fb == name) then
            return nil, where .. ".fallback_model: must be null or another model's name"
        end
        local mot = m.max_output_tokens
        if mot ~= nil and mot ~= json_null and not is_int(mot, 1, 2 ^ 31 - 1) then
            return nil, where .. ".max_output_tokens: must be null or an integer >= 1"
        end
        local media_err = media.validate_model(m, where)
        if media_err then return nil, media_err end
        if m.cache_ttl_s ~= nil and not is_int(m.cache_ttl_s, 0) then
            return nil, where .. ".cache_ttl_s: must be an integer >= 0"
        end
        if not is_object(m.backends) then return nil, where .. ".backends: must be a list" end
        for i, b in ipairs(m.backends) do
            local err = validate_backend(b, where .. ".backends[" .. i .. "]", maps)
            if err then return nil, err end
        end
    end
    for id, c in pairs(s.consumers) do
        local where = "consumers." .. tostring(id)
        if type(id) ~= "string" then return nil, "consumers: must be an object" end
        if not is_object(c) then return nil, where .. ": must be an object" end
        local am = c.allowed_models
        if am ~= nil and am ~= json_null then
            if not is_object(am) then return nil, where .. ".allowed_models: must be null or a list" end
            for _, name in ipairs(am) do
                if type(name) ~= "string" then
                    return nil, where .. ".allowed_models: must hold model names"
                end
            end
        end
        if c.attributes ~= nil and not is_object(c.attributes) then
            return nil, where .. ".attributes: must be an object"
        end
        local plan_id = c.plan_id
        if plan_id ~= nil and plan_id ~= json_null
           and not (is_object(s.plans) and s.plans[tostring(plan_id)]) then
            return nil, where .. ".plan_id: names no plan in plans"
        end
    end
    local mt = s.model_types
    if mt ~= nil then
        if not is_object(mt) then return nil, "model_types: must be an object" end
        for t, target in pairs(mt) do
            if type(t) ~= "string" or type(target) ~= "string" then
                return nil, "model_types: must map type names to model or route names"
            end
        end
    end
    local perr = plans.validate(s.plans) or jwt.validate(s.jwt)
                 or content.validate(s.content_policies) or splits.validate(s.routes, s.models)
                 or admission.validate(s) or realtime_plans.validate(s.plans)
                 or phi_scan.validate_snapshot(s)
    if perr then return nil, perr end
    for hash, k in pairs(s.keys) do
        local where = "keys." .. tostring(hash)
        if type(hash) ~= "string" or not re_find(hash, [[^[0-9a-f]{64}\z]], "jo") then
            return nil, where .. ": key must be a lowercase sha256 hex digest"
        end
        if not is_object(k) then return nil, where .. ": must be an object" end
        if k.consumer_id == nil or k.consumer_id == json_null then
            return nil, where .. ".consumer_id: is required"
        end
        if k.expires_at ~= nil and k.expires_at ~= json_null and type(k.expires_at) ~= "number" then
            return nil, where .. ".expires_at: must be null or unix seconds"
        end
    end
    return true
end

return _M
