-- Per-backend counters the controller merges across gateways for the weight
-- formula: successes, failures and the latency of the last LAST requests, in the
-- sluice_stats dict (keys "ok:<id>", "fail:<id>", "lat:<id>:<slot>", "lati:<id>").
-- Written in the log phase (shared-dict calls only), read by GET /internal/stats.
local cjson = require("cjson.safe")

local ngx = ngx
local pairs = pairs
local setmetatable = setmetatable

local EMPTY_ARRAY_MT = cjson.empty_array_mt

local dict = ngx.shared.sluice_stats

local LAST = 5

local _M = { LAST = LAST }

-- One attempt at backend `id` (string): ok (boolean), latency in ms (or nil).
-- id -> its keys, made once per backend rather than concatenated per request
local keys = setmetatable({}, { __index = function(t, id)
    local k = { ok = "ok:" .. id, fail = "fail:" .. id, lati = "lati:" .. id }
    for slot = 0, LAST - 1 do
        k[slot] = "lat:" .. id .. ":" .. slot
    end
    t[id] = k
    return k
end })

function _M.record(id, ok, latency_ms)
    local k = keys[id]
    dict:incr(ok and k.ok or k.fail, 1, 0)
    if latency_ms then
        local i = dict:incr(k.lati, 1, 0)
        dict:set(k[i % LAST], latency_ms)
    end
end

function _M.backend(id)
    local lat = setmetatable({}, EMPTY_ARRAY_MT)
    for slot = 0, LAST - 1 do
        local v = dict:get("lat:" .. id .. ":" .. slot)
        if v then lat[#lat + 1] = v end
    end
    return {
        successes = dict:get("ok:" .. id) or 0,
        failures = dict:get("fail:" .. id) or 0,
        latency_ms = lat,
    }
end

-- Counters of every backend in `snap` (the compiled snapshot).
function _M.all(snap)
    local out = {}
    if not snap then return out end
    for _, model in pairs(snap.models) do
        for _, pool in pairs(model.pools) do
            for i = 1, pool.n do
                local id = pool.backends[i].id_s
                if not out[id] then out[id] = _M.backend(id) end
            end
        end
    end
    return out
end

return _M
