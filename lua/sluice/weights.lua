-- The controller's weight table: {backend_id: 0..1000} with its own version, pushed
-- every tick to POST /internal/weights and kept raw in the sluice_weights dict.
--
--   push -> validate -> dict {raw, version, received_at, gen}
--   balancer -> effective(id, static) -> pushed weight, decaying to the static one
--
-- Weights that stop arriving are held for HOLD seconds, then blend linearly into
-- each backend's static (snapshot) weight over DECAY seconds (a push may set both,
-- "hold_s" and "decay_s"): a gateway whose
-- controller died ends up on the operator's static weights, never on nothing.
--
-- A push may also name backends whose GPUs are full ("saturated": ids, from fresh
-- telemetry or scrapes): admission (sluice/admission.lua) takes no more requests to
-- them than they have in flight, so their pool queues; the names count only while
-- the table is fresh (not after HOLD), never from a table that stopped arriving.
local cjson = require("cjson.safe")
local moved = require("sluice.moved")

local ngx = ngx
local ngx_now = ngx.now
local type = type
local pairs = pairs
local ipairs = ipairs
local next = next
local setmetatable = setmetatable
local tostring = tostring
local floor = math.floor

local dict = ngx.shared.sluice_weights

local HOLD = 5      -- seconds a pushed table is used as is
local DECAY = 30    -- seconds over which it then blends into the static weights
local MAX_WEIGHT = 1000

local _M = { HOLD = HOLD, DECAY = DECAY }

-- worker-local decoded table and the dict generation it came from
local cached = {}
local cached_gen = -1

local function validate(t)
    if type(t) ~= "table" then return nil, "weights push must be a JSON object" end
    local v = t.version
    if type(v) ~= "number" or floor(v) ~= v or v < 1 or v > 2 ^ 53 then
        return nil, "version: must be an integer >= 1"
    end
    if type(t.weights) ~= "table" then return nil, "weights: must be an object" end
    for _, k in ipairs({ "hold_s", "decay_s" }) do
        if t[k] ~= nil and (type(t[k]) ~= "number" or t[k] <= 0 or t[k] > 86400) then
            return nil, k .. ": must be a number of seconds in (0, 86400]"
        end
    end
    for id, w in pairs(t.weights) do
        if type(id) ~= "string" then return nil, "weights: must be an object" end
        if type(w) ~= "number" or floor(w) ~= w or w < 0 or w > MAX_WEIGHT then
            return nil, "weights." .. id .. ": must be an integer in 0..1000"
        end
    end
    local sat = t.saturated
    if sat ~= nil then
        if type(sat) ~= "table" then return nil, "saturated: must be a list of ids" end
        for _, id in pairs(sat) do
            if type(id) ~= "string" then return nil, "saturated: must be a list of ids" end
        end
    end
    return true
end

-- Take a push. Returns version, or nil, http status, message.
function _M.push(raw)
    local t, err = cjson.decode(raw)
    if not t then
        return nil, 400, "weights are not valid JSON: " .. tostring(err)
    end
    local ok, verr = validate(t)
    if not ok then
        return nil, 400, "invalid weights: " .. verr
    end
    local served = dict:get("version")
    if served and t.version < served then
        return nil, 409, "weights version " .. t.version .. " is older than the served "
                         .. "version " .. served
    end
    -- concurrent pushes: last writer wins, and both carry whole tables
    local stored, serr = dict:safe_set("raw", raw)
    if not stored then
        return nil, 500, "failed to store weights: " .. tostring(serr)
    end
    dict:set("version", t.version)
    dict:set("hold", t.hold_s or HOLD)
    dict:set("decay", t.decay_s or DECAY)
    dict:set("received_at", ngx_now())
    dict:incr("gen", 1, 0)
    moved.bump()
    return t.version
end

local cached_saturated = {}   -- set of backend ids, from the same push
local cached_moved            -- sluice.moved's count when the generation was last read

-- `m`: sluice.moved's count read earlier in this request, or nil (the generation is
-- read then).
local function current(m)
    if m and m == cached_moved then
        return cached, cached_gen
    end
    local gen = dict:get("gen") or 0
    cached_moved = m
    if gen ~= cached_gen then
        local t = cjson.decode(dict:get("raw") or "")
        cached = (t and t.weights) or {}
        local set = {}
        for _, id in ipairs(t and type(t.saturated) == "table" and t.saturated or {}) do
            set[id] = true
        end
        cached_saturated = set
        cached_gen = gen
    end
    return cached, gen
end

-- The weight table generation (changes on every push), for callers' caches.
function _M.gen()
    return dict:get("gen") or 0
end

-- Seconds since the last push (nil: never pushed).
function _M.age()
    local at = dict:get("received_at")
    return at and (ngx_now() - at) or nil
end

-- Blend factor of the static weights now: 0 fresh, 1 fully decayed (or none).
function _M.decay_factor()
    local age = _M.age()
    if not age then return 1 end
    local hold, decay = dict:get("hold") or HOLD, dict:get("decay") or DECAY
    if age <= hold then return 0 end
    if age >= hold + decay then return 1 end
    return (age - hold) / decay
end

-- The weight to use for backend `id` (a string) whose static weight is `static`,
-- given the blend factor `f` from decay_factor().
function _M.effective(id, static, f, table_)
    local pushed = table_[id]
    if pushed == nil or f >= 1 then
        return static
    end
    if f <= 0 then
        return pushed
    end
    return pushed + (static - pushed) * f
end

-- The decoded table this worker uses (and its generation).
_M.current = current

-- Ids of saturated(), as a sorted list (GET /internal/weights).
function _M.saturated_ids()
    local out = {}
    for id in pairs(_M.saturated() or {}) do
        out[#out + 1] = id
    end
    table.sort(out)
    return out
end

-- The backends the last push says are saturated (a set of ids), while it is fresh;
-- nil when none are. `m`: as for current().
function _M.saturated(m)
    current(m)
    if next(cached_saturated) == nil or _M.decay_factor() > 0 then
        return nil
    end
    return cached_saturated
end

-- What GET /internal/weights answers.
function _M.status()
    local t = current()
    local age = _M.age()
    local f = _M.decay_factor()
    return {
        version = dict:get("version") or 0,
        age_s = age or cjson.null,
        state = (not age and "static") or (f <= 0 and "fresh")
                or (f < 1 and "decaying") or "static",
        weights = t,
        -- the backends taken as saturated now (fresh pushes only)
        saturated = setmetatable(_M.saturated_ids(), cjson.empty_array_mt),
    }
end

return _M
