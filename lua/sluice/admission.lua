-- Priority admission: when a pool is saturated, best-effort traffic is shed first.
--
-- Each request has a class: its plan's `priority` (critical | standard | best_effort,
-- default standard; no plan: standard). A plan with `priority_header` lets the caller
-- pick a class with `X-Sluice-Priority`, never above the plan's own: a higher one is
-- lowered to the plan's class, an unknown name is a 400.
--
-- A pool's capacity is the sum of `max_in_flight` over the backends that take
-- traffic now (effective weight > 0: not drained, circuit not open); a pool with one
-- such backend without `max_in_flight` is unlimited and never sheds. A class is
-- admitted while the pool's in-flight count is below its limit:
--
--   best_effort  floor(capacity x BEST_EFFORT_SHARE), at least 1
--   standard     capacity
--   critical     capacity + ceil(capacity x CRITICAL_HEADROOM)
--
-- In-flight counts are per backend, in the sluice_inflight dict ("b:<id>"): the
-- balancer phase counts the attempt's backend (on a retry it moves the count to the
-- new one), the log phase gives it back. ctx.backend.inflight names the backend counted (the
-- context survives redirects, sluice/context.lua),
-- so error_page redirects, timeouts and client aborts (all end in the log phase)
-- give it back too.
--
-- A request its class would refuse waits instead (sluice/queue.lua), up to its plan's
-- `queue_timeout_ms` (absent: 0, refused at once as before), for a slot handed out by
-- class, round robin over consumers within one. A newcomer counts the waiters of its
-- class and above, and the slots handed to waiters, as taken: it never overtakes.
-- FIXME: the check (access) and the count (balancer) are apart: nothing yields
-- between them in one worker, but N workers can each admit the last free slot at
-- once, overshooting a limit by up to N - 1. A worker that dies mid-request leaks its
-- counts until nginx restarts.
local balancer = require("sluice.balancer")
local weights = require("sluice.weights")
local metrics = require("sluice.metrics")
local queue = require("sluice.queue")
local cjson = require("cjson.safe")
local memo = require("sluice.memo")

local ngx = ngx
local ngx_var = ngx.var
local ngx_now = ngx.now
local ngx_log = ngx.log
local ERR = ngx.ERR
local type = type
local pairs = pairs
local tostring = tostring
local floor = math.floor
local ceil = math.ceil
local max = math.max
local str_lower = string.lower

local json_null = cjson.null
local dict = ngx.shared.sluice_inflight

local BEST_EFFORT_SHARE = 0.8
local CRITICAL_HEADROOM = 0.25
local RETRY_AFTER = 1   -- seconds: in-flight requests of a model end quickly or time out
local MAX_WAIT_MS = 600000
local RANKS = { best_effort = 1, standard = 2, critical = 3 }
local NAMES = { "best_effort", "standard", "critical" }
local STANDARD = RANKS.standard

-- backend id -> its in-flight key "b:<id>", made once per worker rather than
-- concatenated twice per request
local key_of = memo.prefixed("b:")

local _M = { BEST_EFFORT_SHARE = BEST_EFFORT_SHARE, CRITICAL_HEADROOM = CRITICAL_HEADROOM }

metrics.register("sluice_requests_shed_total", "counter",
                 "Requests refused with 503 because the model's pool was saturated, "
                 .. "by priority class.", { "model", "priority" })
metrics.register("sluice_backend_in_flight", "gauge",
                 "Requests in flight to a backend (admission control).",
                 { "model", "backend" })

local function present(v)
    return v ~= nil and v ~= json_null
end

-- Snapshot check: plans' priority fields, backends' max_in_flight. Returns nil or a
-- message naming the first bad field.
function _M.validate(s)
    if type(s.plans) == "table" then
        for id, p in pairs(s.plans) do
            if type(p) == "table" then
                local where = "plans." .. tostring(id)
                if present(p.priority) and not RANKS[p.priority] then
                    return where .. ".priority: must be critical, standard or best_effort"
                end
                if present(p.priority_header) and type(p.priority_header) ~= "boolean" then
                    return where .. ".priority_header: must be a boolean"
                end
                if present(p.buffer_at_peak) and type(p.buffer_at_peak) ~= "boolean" then
                    return where .. ".buffer_at_peak: must be a boolean"
                end
                local q = p.queue_timeout_ms
                if present(q) and (type(q) ~= "number" or q < 0 or q > MAX_WAIT_MS
                                   or floor(q) ~= q) then
                    return where .. ".queue_timeout_ms: must be an integer from 0 to "
                           .. MAX_WAIT_MS .. " or null"
                end
            end
        end
    end
    for name, m in pairs(s.models) do
        if type(m) == "table" and type(m.backends) == "table" then
            for i, b in pairs(m.backends) do
                local v = type(b) == "table" and b.max_in_flight or nil
                if present(v) and (type(v) ~= "number" or v < 1 or floor(v) ~= v) then
                    return "models." .. tostring(name) .. ".backends[" .. tostring(i)
                           .. "].max_in_flight: must be an integer >= 1 or null"
                end
            end
        end
    end
    return nil
end

-- Snapshot plans -> { [plan id] = { rank = 1..3, header = boolean, wait = seconds,
-- buffer = boolean } }
function _M.compile(plans)
    local out = {}
    if type(plans) == "table" then
        for id, p in pairs(plans) do
            local q = p.queue_timeout_ms
            out[tostring(id)] = { rank = present(p.priority) and RANKS[p.priority] or STANDARD,
                                  header = p.priority_header == true,
                                  wait = present(q) and q / 1000 or 0,
                                  buffer = p.buffer_at_peak == true }
        end
    end
    return out
end

-- A backend's capacity as the compiled backend carries it (nil: unlimited).
function _M.capacity_of(b)
    local v = b.max_in_flight
    return present(v) and v or nil
end

-- The request's class rank and how long it may wait (seconds; nil rank: bad header).
local function class_of(snap, consumer)
    local p = consumer.plan_id and snap.priorities and snap.priorities[consumer.plan_id]
    if not p then
        return STANDARD, 0
    end
    if p.header then
        local h = ngx_var.http_x_sluice_priority
        if h then
            local asked = RANKS[str_lower(h)]
            if not asked then
                return nil
            end
            return asked < p.rank and asked or p.rank, p.wait
        end
    end
    return p.rank, p.wait
end

-- In flight to the pool's usable backends, and their capacity (nil: unlimited or
-- no usable backend, so admission does not apply). A backend the controller's
-- weight push names saturated (its GPUs are full, sluice/weights.lua) takes no more
-- than it has in flight: its capacity is that count, with or without max_in_flight.
-- `moved`: ctx.target.moved, or nil outside a request's access phase.
local function load(pool, moved)
    balancer.refresh(pool, ngx_now(), moved)
    local sat = weights.saturated(moved)
    local backends, eff = pool.backends, pool.eff
    local cap, busy, full = 0, 0, false
    for i = 1, pool.n do
        if eff[i] > 0 then
            local b = backends[i]
            local n = dict:get(key_of[b.id_s]) or 0
            local m = b.max_in_flight
            if sat and sat[b.id_s] then
                m, full = n, true
            elseif not m then
                return nil
            end
            cap = cap + m
            busy = busy + n
        end
    end
    if cap == 0 and not full then
        return nil
    end
    return busy, cap
end

local function limit(rank, cap)
    if cap == 0 then
        return 0   -- every usable backend saturated and idle: nothing goes
    elseif rank == 1 then
        return max(1, floor(cap * BEST_EFFORT_SHARE))
    elseif rank == 2 then
        return cap
    end
    return cap + ceil(cap * CRITICAL_HEADROOM)
end

-- Dispatch (sluice.queue): may one more slot be handed to class `rank`, with
-- `reserved` slots handed out (this one included)?
local function room(pool, rank, reserved)
    local busy, cap = load(pool)
    return not busy or busy + reserved <= limit(rank, cap)
end
queue.init(room)

-- Access phase, before a backend is chosen: returns 400 (bad X-Sluice-Priority),
-- 503 (saturated: no wait allowed, or the wait ended without a slot) or 499 (the
-- caller went away while waiting) with type, message, extra for the error template;
-- else nil, perhaps after a wait (sluice.queue writes ctx.backend.queue_slot, .queue_ms).
function _M.admit(ctx, snap, consumer, model_name, pool)
    if not pool.capped_checked then
        -- one pass per compiled pool: does any backend have a capacity at all?
        local capped = false
        for i = 1, pool.n do
            if pool.backends[i].max_in_flight then capped = true end
        end
        pool.capped, pool.capped_checked = capped, true
    end
    local rank, wait = class_of(snap, consumer)
    if not rank then
        return 400, "invalid_request",
               "X-Sluice-Priority must be critical, standard or best_effort"
    end
    local moved = ctx.target.moved
    if not pool.capped and not weights.saturated(moved) then
        return
    end
    local busy, cap = load(pool, moved)
    if not busy then
        return
    end
    local taken = busy + queue.reserved(pool) + queue.ahead(pool, rank)
    if taken < limit(rank, cap) then
        return
    end
    local name = NAMES[rank]
    if wait > 0 then
        return queue.wait(ctx, pool, model_name, rank, name, consumer.key_id or tostring(consumer.id),
                          wait, cap)
    end
    metrics.inc("sluice_requests_shed_total", 1, model_name, name)
    return 503, "backend_unavailable", "model " .. model_name
           .. " is saturated (" .. busy .. " requests in flight, capacity "
           .. cap .. "); " .. name .. " requests are refused first",
           { retry_after = RETRY_AFTER }
end

-- After admit() refused with 503 (saturated): may this request become an async job
-- instead (sluice/jobs.lua)? Only a best-effort request (its class as ranked above)
-- of a plan with `buffer_at_peak`.
function _M.buffers(snap, consumer)
    local p = consumer.plan_id and snap.priorities and snap.priorities[consumer.plan_id]
    if not p or not p.buffer then
        return false
    end
    return class_of(snap, consumer) == 1
end

local function leave(id)
    local n, err = dict:incr(key_of[id], -1, 0)
    if not n then
        ngx_log(ERR, "in-flight count of backend ", id, " unavailable: ", err)
    elseif n < 0 then
        dict:set(key_of[id], 0)   -- cannot happen; never let it drift below zero
    end
end

-- Balancer phase, every attempt: count it against the backend it goes to (a slot a
-- waiter was handed becomes this count: sluice.queue clears ctx.backend.queue_slot).
function _M.attempt(ctx)
    local held = ctx.backend
    local id = held.pool.backends[held.index].id_s
    local prior = held.inflight
    if prior == id then
        return
    end
    if prior then
        leave(prior)
    end
    local _, err = dict:incr(key_of[id], 1, 0)
    if err then
        ngx_log(ERR, "in-flight count of backend ", id, " unavailable: ", err)
        held.inflight = nil
    else
        held.inflight = id
    end
    queue.claim(ctx)
end

-- Log phase: the request is over; give its count back, and the slot to a waiter.
function _M.release(ctx)
    local held = ctx.backend
    local id = held.inflight
    if id then
        held.inflight = nil
        leave(id)
    end
    queue.release(ctx, held.pool)
end

-- Requests in flight to backend `id` (string).
function _M.in_flight(id)
    return dict:get(key_of[id]) or 0
end

-- Requests waiting for a slot, per model served and class, over its pools:
-- { [model] = { critical = n, standard = n, best_effort = n } }.
function _M.queues(snap)
    local out = {}
    if not snap then return out end
    for name, model in pairs(snap.models) do
        local sum = { 0, 0, 0 }
        for _, pool in pairs(model.pools) do
            local d = queue.depth(pool)
            for c = 1, 3 do sum[c] = sum[c] + d[c] end
        end
        out[name] = { best_effort = sum[1], standard = sum[2], critical = sum[3] }
    end
    return out
end

-- At scrape time (GET /metrics): the in-flight gauge of every backend served, the
-- queue depth of every model with a capacity.
function _M.export_metrics(snap)
    if not snap then return end
    for name, model in pairs(snap.models) do
        for _, pool in pairs(model.pools) do
            for i = 1, pool.n do
                local b = pool.backends[i]
                metrics.set("sluice_backend_in_flight", _M.in_flight(b.id_s), name,
                            b.name or b.id_s)
            end
        end
    end
    for name, depth in pairs(_M.queues(snap)) do
        for class, n in pairs(depth) do
            metrics.set("sluice_queue_depth", n, name, class)
        end
    end
end

return _M
