-- Backend readiness from the controller's active health checks, pushed to
-- POST /internal/health and kept raw in the sluice_health dict:
--
--   {"version": 1764435600123, "ttl_s": 10,
--    "backends": {"3": {"state": "loading", "retry_after": 5}, "4": {"state": "ready"}}}
--
-- A `loading` backend gets no traffic while another backend of its pool can take it;
-- when every backend the pool could use is loading, the caller gets 503 "model <m> is
-- loading" with retry_after. Other states (`ready`, `unreachable`, `unknown`) only
-- show in /internal/health and /metrics: failures are the breaker's business. States
-- lapse `ttl_s` seconds after the push (a controller that stopped probing must not
-- keep a backend out forever).
local cjson = require("cjson.safe")
local moved = require("sluice.moved")
local metrics = require("sluice.metrics")

local ngx = ngx
local ngx_now = ngx.now
local type = type
local pairs = pairs
local tostring = tostring
local floor = math.floor
local huge = math.huge

local dict = ngx.shared.sluice_health

local STATES = { ready = 0, loading = 1, unreachable = 2, unknown = 3 }
local DEFAULT_TTL = 10
local DEFAULT_RETRY_AFTER = 5

local _M = {}

metrics.register("sluice_backend_health_state", "gauge",
                 "Backend readiness from the controller's health checks: 0 ready, "
                 .. "1 loading, 2 unreachable, 3 unknown (unchecked or lapsed).",
                 { "model", "backend" })

-- worker-local decoded states and the dict generation they came from
local states = {}
local cached_gen = -1

local function validate(t)
    if type(t) ~= "table" then return "health push must be a JSON object" end
    local v = t.version
    if type(v) ~= "number" or floor(v) ~= v or v < 1 or v > 2 ^ 53 then
        return "version: must be an integer >= 1"
    end
    if t.ttl_s ~= nil and (type(t.ttl_s) ~= "number" or t.ttl_s <= 0 or t.ttl_s > 86400) then
        return "ttl_s: must be a number of seconds in (0, 86400]"
    end
    if type(t.backends) ~= "table" then return "backends: must be an object" end
    for id, s in pairs(t.backends) do
        local where = "backends." .. tostring(id)
        if type(id) ~= "string" or type(s) ~= "table" then
            return "backends: must map backend ids to objects"
        end
        if not STATES[s.state] then
            return where .. ".state: must be ready, loading, unreachable or unknown"
        end
        local ra = s.retry_after
        if ra ~= nil and (type(ra) ~= "number" or ra < 1 or ra > 86400) then
            return where .. ".retry_after: must be seconds in [1, 86400]"
        end
    end
    return nil
end

-- Take a push. Returns version, or nil, http status, message.
function _M.push(raw)
    local t, err = cjson.decode(raw)
    if not t then
        return nil, 400, "health is not valid JSON: " .. tostring(err)
    end
    local verr = validate(t)
    if verr then
        return nil, 400, "invalid health: " .. verr
    end
    local served = dict:get("version")
    if served and t.version < served then
        return nil, 409, "health version " .. t.version .. " is older than the served "
                         .. "version " .. served
    end
    local ok, serr = dict:safe_set("raw", raw)
    if not ok then
        return nil, 500, "failed to store health: " .. tostring(serr)
    end
    dict:set("version", t.version)
    dict:set("expires_at", ngx_now() + (t.ttl_s or DEFAULT_TTL))
    dict:incr("gen", 1, 0)
    moved.bump()
    return t.version
end

-- Generation of the pushed states (changes on every push), for callers' caches.
function _M.gen()
    return dict:get("gen") or 0
end

-- When the pushed states lapse (math.huge: nothing pushed).
function _M.expires_at()
    return dict:get("expires_at") or huge
end

local function current(now)
    local gen = dict:get("gen") or 0
    if gen ~= cached_gen then
        local t = cjson.decode(dict:get("raw") or "")
        states = (t and t.backends) or {}
        cached_gen = gen
    end
    if now >= _M.expires_at() then
        return nil
    end
    return states
end

-- The retry_after of backend `id` (a string) when it is loading, else nil.
function _M.loading(id, now)
    local t = current(now)
    local s = t and t[id]
    if s and s.state == "loading" then
        return s.retry_after or DEFAULT_RETRY_AFTER
    end
    return nil
end

-- Access phase, when no backend of `pool` could be chosen: 503, type, message,
-- extra ("model loading") if any of them is loading (the soonest retry_after), else nil.
function _M.refuse(pool, model_name)
    local now = ngx_now()
    local soonest
    for i = 1, pool.n do
        local ra = _M.loading(pool.backends[i].id_s, now)
        if ra and (not soonest or ra < soonest) then soonest = ra end
    end
    if soonest then
        return 503, "backend_unavailable", "model " .. model_name .. " is loading",
               { retry_after = soonest }
    end
end

-- What GET /internal/health answers.
function _M.status()
    local now = ngx_now()
    local t = current(now)
    local exp = _M.expires_at()
    return {
        version = dict:get("version") or 0,
        state = (exp == huge and "none") or (t and "fresh") or "lapsed",
        backends = t or {},
    }
end

-- At scrape time (GET /metrics): the state of every backend served.
function _M.export_metrics(snap)
    if not snap then return end
    local t = current(ngx_now()) or {}
    for name, model in pairs(snap.models) do
        for _, pool in pairs(model.pools) do
            for i = 1, pool.n do
                local b = pool.backends[i]
                local s = t[b.id_s]
                metrics.set("sluice_backend_health_state", STATES[s and s.state or "unknown"],
                            name, b.name or b.id_s)
            end
        end
    end
end

return _M
