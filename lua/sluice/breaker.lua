-- Circuit breaker per backend, shared by the workers through the sluice_breaker dict.
--
--   closed --(error rate > threshold over `window`, at least `min_requests`)--> open
--   open --(cooldown elapsed)--> half-open: up to `probes` requests get through
--   half-open --probe succeeds--> closed      half-open --probe fails--> open again
--
-- Keys: "n:<id>:<bucket>" / "e:<id>:<bucket>" requests and errors per bucket of
-- window/BUCKETS seconds (expiring); "open:<id>" = unix time the cooldown ends;
-- "probes:<id>" probes taken in this half-open period; "gen" moves on every state
-- change so workers rebuild their view of a pool only then (and when a cooldown ends).
local moved = require("sluice.moved")
local memo = require("sluice.memo")

local ngx = ngx
local ngx_now = ngx.now
local ngx_log = ngx.log
local WARN = ngx.WARN
local NOTICE = ngx.NOTICE
local floor = math.floor
local type = type
local pairs = pairs
local tostring = tostring

local dict = ngx.shared.sluice_breaker

local BUCKETS = 6
local DEFAULTS = {
    window_s = 60,          -- error rate measured over this many seconds
    error_threshold = 0.3,  -- opens above this fraction of failed requests
    min_requests = 20,      -- ... once the window holds at least this many
    cooldown_s = 30,        -- open this long before half-open probes
    probes = 1,             -- concurrent probes let through when half-open
}

local _M = { DEFAULTS = DEFAULTS }

-- id -> "open:<id>", and id -> the request-count key of the current bucket: built
-- once per backend (and bucket), not concatenated on every request
local open_key = memo.prefixed("open:")
local count_key = {}   -- id -> { bucket, "n:<id>:<bucket>" }

local function n_key(id, b)
    local c = count_key[id]
    if not c or c[1] ~= b then
        c = { b, "n:" .. id .. ":" .. b }
        count_key[id] = c
    end
    return c[2]
end

-- Snapshot's optional "breaker" object over the defaults; validated by config.lua.
function _M.settings(s)
    local out = {}
    for k, v in pairs(DEFAULTS) do
        out[k] = (type(s) == "table" and type(s[k]) == "number") and s[k] or v
    end
    return out
end

function _M.validate(s)
    if s == nil then return true end
    if type(s) ~= "table" then return nil, "breaker: must be an object" end
    for k, v in pairs(s) do
        if DEFAULTS[k] == nil then return nil, "breaker." .. tostring(k) .. ": unknown" end
        if type(v) ~= "number" or v <= 0 then
            return nil, "breaker." .. k .. ": must be a positive number"
        end
    end
    if s.error_threshold and s.error_threshold > 1 then
        return nil, "breaker.error_threshold: must be in (0, 1]"
    end
    return true
end

function _M.gen()
    return dict:get("gen") or 0
end

-- id -> true while this worker last saw the circuit closed (open_until, the
-- balancer's refresh): a success then needs no look at the circuit (record)
local seen_closed = {}

-- Unix time the backend's cooldown ends, or nil when closed.
function _M.open_until(id)
    local until_ = dict:get(open_key[id])
    seen_closed[id] = not until_
    return until_
end

function _M.state(id, now)
    local until_ = dict:get(open_key[id])
    if not until_ then return "closed" end
    return (now or ngx_now()) < until_ and "open" or "half_open"
end

local function open(id, cfg, why)
    seen_closed[id] = false
    dict:set(open_key[id], ngx_now() + cfg.cooldown_s)
    dict:delete("probes:" .. id)
    dict:incr("gen", 1, 0)
    moved.bump()
    ngx_log(WARN, "circuit of backend ", id, " opened: ", why)
end

local function close(id, bucket_s)
    dict:delete(open_key[id])
    dict:delete("probes:" .. id)
    -- forget the errors that opened it, or the next failure would reopen at once
    local b = floor(ngx_now() / bucket_s)
    for i = b - BUCKETS, b do
        dict:delete("n:" .. id .. ":" .. i)
        dict:delete("e:" .. id .. ":" .. i)
    end
    dict:incr("gen", 1, 0)
    moved.bump()
    ngx_log(NOTICE, "circuit of backend ", id, " closed: probe succeeded")
end

-- Half-open: may one more probe go to backend `id`?
function _M.take_probe(id, cfg)
    local n = dict:incr("probes:" .. id, 1, 0, cfg.cooldown_s)
    return n and n <= cfg.probes
end

-- One finished attempt at backend `id` (string). A success at a backend this worker
-- last saw closed is only counted: had the circuit opened since, it was sent before
-- (counted or not, the window is cleared when the circuit closes).
function _M.record(id, ok, cfg)
    local now = ngx_now()
    local bucket_s = cfg.window_s / BUCKETS
    if ok and seen_closed[id] then
        dict:incr(n_key(id, floor(now / bucket_s)), 1, 0, cfg.window_s + bucket_s)
        return
    end
    local until_ = dict:get(open_key[id])
    if until_ then
        if now >= until_ then   -- a half-open probe's outcome
            if ok then
                close(id, cfg.window_s / BUCKETS)
            else
                open(id, cfg, "half-open probe failed")
            end
        end
        return   -- otherwise: a request sent before it opened; already counted
    end
    seen_closed[id] = true
    local b = floor(now / bucket_s)
    local ttl = cfg.window_s + bucket_s
    dict:incr(n_key(id, b), 1, 0, ttl)
    if ok then return end
    dict:incr("e:" .. id .. ":" .. b, 1, 0, ttl)
    local total, errors = 0, 0
    for i = b - BUCKETS + 1, b do
        total = total + (dict:get("n:" .. id .. ":" .. i) or 0)
        errors = errors + (dict:get("e:" .. id .. ":" .. i) or 0)
    end
    if total >= cfg.min_requests and errors / total > cfg.error_threshold then
        open(id, cfg, errors .. " of " .. total .. " requests failed in "
                      .. cfg.window_s .. "s")
    end
end

return _M
