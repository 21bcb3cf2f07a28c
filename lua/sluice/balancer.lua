-- Weighted choice among a pool's backends: smooth weighted round-robin (as nginx's
-- upstream module) over effective weights = controller weight (decaying to the
-- static one, weights.lua) x health (0 while the backend's circuit is open,
-- breaker.lua). Per worker, deterministic; the effective weights are rebuilt only
-- when the weight table or a circuit changes (or a cooldown/decay step is due).
--
-- Retries: up to MAX_RETRIES other backends, after a connect failure or a 5xx
-- answer, only while nothing was sent to the caller (nginx's proxy_next_upstream
-- guarantees it; see nginx.conf.tmpl).
local ngx_balancer = require("ngx.balancer")
local weights = require("sluice.weights")
local breaker = require("sluice.breaker")
local health = require("sluice.health")
local swrr = require("sluice.swrr")
local stats = require("sluice.stats")
local metrics = require("sluice.metrics")
local ms_of = require("sluice.nginx_time").ms

local ngx = ngx
local ngx_log = ngx.log
local ngx_now = ngx.now
local ERR = ngx.ERR
local ngx_exit = ngx.exit
local set_current_peer = ngx_balancer.set_current_peer
local set_more_tries = ngx_balancer.set_more_tries
local set_timeouts = ngx_balancer.set_timeouts
local get_last_failure = ngx_balancer.get_last_failure
local min = math.min
local ceil = math.ceil
local huge = math.huge
local tonumber = tonumber
local type = type
local pairs = pairs
local str_find = string.find
local str_sub = string.sub

local CONNECT_TIMEOUT = 5   -- seconds; the model's timeout_ms still caps it
local MAX_RETRIES = 2       -- other backends tried after the first

local _M = { MAX_RETRIES = MAX_RETRIES }

metrics.register("sluice_backend_weight", "gauge",
                 "Effective weight of a backend: controller weight (or static) x health.",
                 { "model", "backend" })
metrics.register("sluice_backend_circuit_state", "gauge",
                 "Circuit breaker of a backend: 0 closed, 1 open, 2 half-open.",
                 { "model", "backend" })
local CIRCUIT_CODE = { closed = 0, open = 1, half_open = 2 }

-- Rebuild pool.eff (effective weights) when something they depend on moved. `m`:
-- sluice.moved's count read earlier in this request (ctx.target.moved), or nil: then
-- the generations are read.
local function refresh(pool, now, m)
    if m and m == pool.moved and now < pool.next_refresh then
        return
    end
    local wgen, bgen, hgen = weights.gen(), breaker.gen(), health.gen()
    if wgen == pool.w_gen and bgen == pool.b_gen and hgen == pool.h_gen
       and now < pool.next_refresh then
        pool.moved = m
        return
    end
    local tbl = weights.current(m)
    local f = weights.decay_factor()
    local next_refresh = f < 1 and now + 1 or huge   -- decaying: step once a second
    local lapse = health.expires_at()                 -- pushed health states end then
    if lapse > now and lapse < next_refresh then next_refresh = lapse end
    local backends, static, eff, open = pool.backends, pool.weights, pool.eff, pool.open
    local usable = 0
    for i = 1, pool.n do
        local id = backends[i].id_s
        local w = weights.effective(id, static[i], f, tbl)
        local until_ = breaker.open_until(id)
        open[i] = until_ or false
        if until_ and now < until_ then
            w = 0
            if until_ < next_refresh then next_refresh = until_ end
        end
        if health.loading(id, now) then w = 0 end   -- loading: no traffic (health.lua)
        eff[i] = w
        if w > 0 then usable = usable + 1 end
    end
    pool.usable = usable
    pool.w_gen, pool.b_gen, pool.h_gen, pool.next_refresh = wgen, bgen, hgen, next_refresh
    pool.moved = m
end
_M.refresh = refresh   -- admission.lua reads pool.eff too

-- Can a retry go from backend `a` to backend `b`? It reuses the request nginx
-- already built: the URI (base_path) and the credentials header must fit, and the
-- location and TLS variables (scheme, trust set, name, client pair: tls_id), and a
-- hosted vendor's headers, paths and query (shape_id: sluice.shape).
local function interchangeable(a, b)
    return a.base_path == b.base_path and a.auth_header == b.auth_header
           and a.tls_id == b.tls_id and a.shape_id == b.shape_id
end

-- Index of the next backend (smooth weighted round-robin, sluice/swrr.lua),
-- skipping indexes in `skip` (a set, or nil) and, when `like` (a backend) is given,
-- backends not interchangeable with it. Returns nil when none is eligible.
local swrr_pick = swrr.pick
local function pick(pool, skip, like)
    return swrr_pick(pool, skip, like, interchangeable)
end

-- pick(), but a backend whose circuit is half-open is taken only with a probe slot.
local function pick_healthy(pool, skip, like, cfg)
    while true do
        local i = pick(pool, skip, like)
        if not i or not pool.open[i] or breaker.take_probe(pool.backends[i].id_s, cfg) then
            return i
        end
        skip = skip or {}
        skip[i] = true
    end
end

-- Access phase: choose the first backend. Returns it; or nil and the seconds until
-- a circuit may let traffic through (nil when the pool is simply drained).
function _M.choose(ctx, pool, cfg)
    local now = ngx_now()
    refresh(pool, now, ctx.target.moved)
    local idx = pick_healthy(pool, nil, nil, cfg)
    if not idx then
        local soonest
        for i = 1, pool.n do
            local until_ = pool.open[i]
            if until_ and (not soonest or until_ < soonest) then soonest = until_ end
        end
        return nil, soonest and ceil(soonest - now) or nil
    end
    local held = ctx.backend
    held.pool = pool
    held.breaker_cfg = cfg
    held.index = idx
    return pool.backends[idx]
end

-- Balancer phase.
function _M.balance(ctx, model)
    local held = ctx.backend
    local pool = held.pool
    if not pool then
        ngx_log(ERR, "balancer reached without a chosen backend")
        return ngx_exit(500)
    end
    local idx = held.index
    if held.tries then
        -- a retry: the previous backend failed to connect or answered 5xx. `tried`,
        -- this pass's indexes, is made on the first retry (one attempt needs none).
        local tried = held.tried
        if not tried then
            tried = { idx }
            held.tried = tried
        end
        local state, code = get_last_failure()
        local prev = pool.backends[idx]
        ngx_log(ERR, "backend ", prev.name or prev.id, " (", prev.host, ":", prev.port,
                ") failed: ", state, " ", code, "; retrying another")
        local skip = {}
        for i = 1, #tried do skip[tried[i]] = true end
        idx = pick_healthy(pool, skip, prev, held.breaker_cfg) or idx
        held.index = idx
        tried[#tried + 1] = idx
        held.tries = #tried
    else
        held.tries = 1
        local first = pool.backends[idx]
        local others = 0
        for i = 1, pool.n do
            if i ~= idx and pool.eff[i] > 0 and interchangeable(first, pool.backends[i]) then
                others = others + 1
            end
        end
        if others > 0 then
            local ok, err = set_more_tries(min(MAX_RETRIES, others))
            if not ok then
                ngx_log(ERR, "failed to set more tries: ", err)
            end
        end
    end

    local b = pool.backends[idx]
    -- for the log phase: every attempt of every pass (the fallback's too), in order
    -- one attempt: its id; more: a list (no table for the usual single attempt)
    local ids = held.tried_ids
    if ids == nil then
        held.tried_ids = b.id_s
    elseif type(ids) == "string" then
        held.tried_ids = { ids, b.id_s }
    else
        ids[#ids + 1] = b.id_s
    end
    local ok, err = set_current_peer(b.host, b.port)
    if not ok then
        ngx_log(ERR, "failed to set peer ", b.host, ":", b.port, ": ", err)
        return ngx_exit(500)
    end
    local t = model.timeout
    ok, err = set_timeouts(min(t, CONNECT_TIMEOUT), t, t)
    if not ok then
        ngx_log(ERR, "failed to set timeouts: ", err)
    end
end

-- At scrape time (GET /metrics): weight and circuit gauges of every backend served.
function _M.export_metrics(snap)
    if not snap then return end
    local now = ngx_now()
    for name, model in pairs(snap.models) do
        for _, pool in pairs(model.pools) do
            refresh(pool, now)
            for i = 1, pool.n do
                local b = pool.backends[i]
                local label = b.name or b.id_s
                metrics.set("sluice_backend_weight", pool.eff[i], name, label)
                metrics.set("sluice_backend_circuit_state",
                            CIRCUIT_CODE[breaker.state(b.id_s, now)], name, label)
            end
        end
    end
end

-- The n-th item of an nginx upstream variable: "502, 200" (retries), "504 : 200"
-- (a second upstream after an internal redirect: the model's fallback).
-- The next "," or ":" from `pos`: plain finds, which LuaJIT compiles (a pattern find
-- it does not, and this runs in every request's log phase).
local function next_sep(s, pos)
    local comma, colon = str_find(s, ",", pos, true), str_find(s, ":", pos, true)
    if comma and colon then
        return comma < colon and comma or colon
    end
    return comma or colon
end

local function item(s, n)
    local pos = 1
    for _ = 2, n do
        local sep = next_sep(s, pos)
        if not sep then return nil end
        pos = sep + 2
    end
    local sep = next_sep(s, pos)
    return str_sub(s, pos, sep and sep - 1 or -1)
end

-- The outcome of attempt `n`, at backend `id`, into the stats and the breaker.
local function record(id, statuses, times, n, cfg)
    local status = tonumber(item(statuses, n) or "")
    if status then
        local ok = status < 500
        local ms = times and ms_of(item(times, n) or "")
        stats.record(id, ok, ms)
        breaker.record(id, ok, cfg)
    end
end

-- Log phase: each attempt's outcome into the stats and the breaker (dict calls
-- only). `tried` is ctx.backend.tried_ids (backend ids in attempt order: "3" for one attempt,
-- {"3", "7"} for more), `statuses` / `times` are $upstream_status /
-- $upstream_response_time.
function _M.log(tried, statuses, times, cfg)
    if not statuses then
        return
    end
    if type(tried) == "string" then
        return record(tried, statuses, times, 1, cfg)
    end
    for n = 1, #tried do
        record(tried[n], statuses, times, n, cfg)
    end
end

return _M
