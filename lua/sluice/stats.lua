-- Per-backend counters the controller merges across gateways for the weight
-- formula: successes, failures and the latency of the last LAST requests, in the
-- sluice_stats dict (keys "ok:<id>", "fail:<id>", "lat:<id>:<slot>", "lati:<id>").
-- The log phase adds to a per-worker buffer (plain Lua tables); the metrics flush
-- (sluice.metrics: every second, at worker exit, and on request of a reader) adds
-- it into the dict. GET /internal/stats asks every worker to flush first
-- (metrics.sync), so it sees every attempt finished before it.
local cjson = require("cjson.safe")
local metrics = require("sluice.metrics")
local memo = require("sluice.memo")

local ngx = ngx
local pairs = pairs
local setmetatable = setmetatable
local clear_tab = require("table.clear")

local EMPTY_ARRAY_MT = cjson.empty_array_mt

local dict = ngx.shared.sluice_stats

local LAST = 5

local _M = { LAST = LAST }

-- id -> its keys, made once per backend rather than concatenated per request
local keys = memo.new(function(id)
    local k = { ok = "ok:" .. id, fail = "fail:" .. id, lati = "lati:" .. id }
    for slot = 0, LAST - 1 do
        k[slot] = "lat:" .. id .. ":" .. slot
    end
    return k
end)

-- This worker's buffer: id -> successes, failures; id -> the latencies since the
-- last flush (a ring of the last LAST: [0..LAST-1], and `n` ever put).
local oks, fails, lats = {}, {}, {}

-- One attempt at backend `id` (string): ok (boolean), latency in ms (or nil).
function _M.record(id, ok, latency_ms)
    if ok then
        oks[id] = (oks[id] or 0) + 1
    else
        fails[id] = (fails[id] or 0) + 1
    end
    if latency_ms then
        local ring = lats[id]
        if not ring then
            ring = { n = 0 }
            lats[id] = ring
        end
        local n = ring.n
        ring[n % LAST] = latency_ms
        ring.n = n + 1
    end
end

local function flush()
    for id, n in pairs(oks) do
        dict:incr(keys[id].ok, n, 0)
    end
    for id, n in pairs(fails) do
        dict:incr(keys[id].fail, n, 0)
    end
    for id, ring in pairs(lats) do
        -- the newest samples, oldest first, into the shared ring's next slots
        local k = keys[id]
        local n = ring.n < LAST and ring.n or LAST
        local last = dict:incr(k.lati, n, 0)
        if last then
            for j = 1, n do
                dict:set(k[(last - n + j) % LAST], ring[(ring.n - n + j - 1) % LAST])
            end
        end
    end
    clear_tab(oks)
    clear_tab(fails)
    clear_tab(lats)
end
metrics.on_flush(flush)

function _M.backend(id)
    local k = keys[id]
    local lat = setmetatable({}, EMPTY_ARRAY_MT)
    for slot = 0, LAST - 1 do
        local v = dict:get(k[slot])
        if v then lat[#lat + 1] = v end
    end
    return {
        successes = dict:get(k.ok) or 0,
        failures = dict:get(k.fail) or 0,
        latency_ms = lat,
    }
end

-- Counters of every backend in `snap` (the compiled snapshot), once every worker
-- flushed its buffer (content phase: may wait, see metrics.sync).
function _M.all(snap)
    metrics.sync()
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
