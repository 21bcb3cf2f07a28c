-- A consumer's plan on the hot path: rate limit, concurrent requests, request
-- quotas, token quota (reservation, tokens.lua). Refusals name the first limit that
-- refuses in that order (cheapest refusal first). The concurrency slot is taken
-- here, in the worker's shared dict; the other limits are taken together by
-- limits.take_all (the shared dict, see limits.lua; or one Redis round trip in
-- cluster mode, redis_limits.lua). A consumer without a plan is not limited.
local limits = require("sluice.limits")
local plans = require("sluice.plans")
local metrics = require("sluice.metrics")
local tokens = require("sluice.tokens")
local new_tab = require("table.new")
local decimal = require("sluice.decimal").of

local ngx = ngx
local ngx_arg = ngx.arg
local ngx_var = ngx.var
local ngx_log = ngx.log
local ERR = ngx.ERR

local _M = {}

metrics.register("sluice_rate_limited_total", "counter",
                 "Requests refused with 429 by a consumer's plan, by limit that refused.",
                 { "model", "plan", "limit" })

-- `limit`: rate, concurrent, daily, monthly or tokens
local function refuse(msg, retry_after, model_name, lim, limit)
    metrics.inc("sluice_rate_limited_total", 1, model_name, lim.name, limit)
    return 429, "rate_limited", msg, { retry_after = retry_after }
end

-- The counter keys of consumer `cid` under limits `lim`, built once per snapshot
-- version: `lim` is compiled with the snapshot, so the cache goes with it.
local function keys_for(lim, cid)
    local cache = lim.key_cache
    if not cache then
        cache = {}
        lim.key_cache = cache
    end
    local k = cache[cid]
    if not k then
        k = {
            slot = "c:" .. cid,
            rate = "r:" .. cid .. lim.rate_scope,
            daily = lim.daily and "qd:" .. cid .. lim.daily_scope .. ":",
            monthly = lim.monthly and "qm:" .. cid .. lim.monthly_scope .. ":",
            tokens = lim.tokens and "tm:" .. cid .. lim.tokens_scope .. ":",
        }
        cache[cid] = k
    end
    return k
end

-- The limits of this request for limits.take_all (fields: see limits.lua). A request
-- already refused a concurrency slot takes the rate limit only: like the quotas'
-- counters, it would only have to give them back.
local function wanted(ctx, lim, keys, llm, slot_refused)
    local req = new_tab(0, 16)
    req.rate_key, req.rate, req.burst = keys.rate, lim.rate, lim.burst
    if slot_refused then
        return req
    end
    if lim.daily then
        req.daily_prefix, req.daily = keys.daily, lim.daily
    end
    if lim.monthly then
        req.monthly_prefix = keys.monthly
        req.monthly = lim.monthly
    end
    local body = ctx.body
    if lim.tokens and llm and body.doc then
        req.tokens_prefix = keys.tokens
        req.tokens = lim.tokens
        req.reserve = tokens.reservation(body.len, body.doc)
    end
    return req
end

-- Returns nil when the request may go on; else status, type, message, extra.
-- `llm`: the endpoint counts tokens (monthly_tokens applies).
function _M.check(ctx, snap, consumer, model_name, llm)
    local plan = consumer.plan_id and snap.plans[consumer.plan_id]
    if not plan then
        return nil
    end
    local lim = plans.limits(plan, model_name)
    local keys = keys_for(lim, consumer.key_id)
    -- ctx.quota: what this request holds of its plan's limits (a table kept with
    -- the context): slot (false: none or given back), daily and monthly (request
    -- quota counters counted, given back by undo())
    local q = ctx.quota
    if not q then
        q = new_tab(0, 3)
        ctx.quota = q
    end
    q.slot = false   -- checked: the context now knows whether a slot is held

    -- the slot first (it costs nothing), so that one take_all takes the rest
    local slot_refused = false
    if lim.concurrent then
        local key = keys.slot
        local entered, err = limits.enter(key, lim.concurrent)
        if entered then
            q.slot = key
        elseif entered == nil then
            ngx_log(ERR, "concurrency limit unavailable: ", err)
        else
            slot_refused = true
        end
    end

    local req = wanted(ctx, lim, keys, llm, slot_refused)
    local refused, retry_after, why = limits.take_all(req)
    if req.remaining then
        -- X-RateLimit-* by nginx's add_header (nginx.conf.tmpl), on every answer of
        -- this request (error pages and a fallback's too: variables survive the
        -- redirect): three variable writes here cost a third of what three
        -- ngx.header writes in the header filter did
        ngx_var.sl_rl_limit = decimal(lim.burst)
        ngx_var.sl_rl_left = decimal(req.remaining)
        ngx_var.sl_rl_reset = decimal(req.reset)
    end
    if refused == "unavailable" then   -- cluster mode: Redis down, failure = "closed"
        return 503, "backend_unavailable", why, { retry_after = retry_after }
    elseif refused == "rate" then
        local key = q.slot
        if key then     -- taken above, not needed after all
            q.slot = false
            limits.leave(key)
        end
        return refuse("rate limit of plan " .. lim.name .. " exceeded ("
                      .. lim.rate .. " requests per second, burst " .. lim.burst .. ")",
                      retry_after, model_name, lim, "rate")
    elseif slot_refused then
        return refuse("too many concurrent requests (plan " .. lim.name .. " allows "
                      .. lim.concurrent .. ")", 1, model_name, lim, "concurrent")
    elseif refused == "daily" then
        return refuse("daily request quota of plan " .. lim.name .. " used up ("
                      .. lim.daily .. " requests)", retry_after, model_name, lim, "daily")
    elseif refused == "monthly" then
        return refuse("monthly request quota of plan " .. lim.name .. " used up ("
                      .. lim.monthly .. " requests)", retry_after, model_name, lim, "monthly")
    elseif refused == "tokens" then
        return refuse("monthly token quota of plan " .. lim.name .. " would be exceeded ("
                      .. lim.tokens .. " tokens; this request may use up to " .. req.reserve
                      .. ")", retry_after, model_name, lim, "tokens")
    end
    if req.token_key then
        tokens.hold(ctx, req.token_key, req.reserve)
    end
    if req.daily_key or req.monthly_key then   -- for undo()
        q.daily, q.monthly = req.daily_key, req.monthly_key
    end
    return nil
end

-- The concurrency slot goes back as soon as the answer ends (before the caller has
-- its last byte, so its next request finds the slot free), else in the log phase.
local function release_slot(q)
    local key = q.slot
    if key then
        q.slot = false
        return limits.leave(key)
    end
end

-- body_filter: watch for the backend's token usage when tokens are reserved.
function _M.body_filter(ctx)
    local u = ctx.usage
    if u and u.scan then
        tokens.body_filter(ctx)
    end
    -- ngx.arg is a C call (no FFI): read only when there is a slot to give back
    local q = ctx.quota
    if q and q.slot and ngx_arg[2] then
        release_slot(q)
    end
end

-- error page: the request failed; give the slot and reserved tokens back now.
function _M.failed(ctx)
    local q = ctx.quota
    if q then
        release_slot(q)
    end
    tokens.refund(ctx)
end

-- access: the request is buffered as an async job (plan `buffer_at_peak`), or it is a
-- job's run refused for saturation (the worker retries it); the job passes through
-- check() again when it runs, so give back everything check() took that the job will
-- take again: the slot, the token reservation, the request quotas.
-- The rate limit's token stays taken (like a refused request's: the gateway did
-- handle this request).
function _M.undo(ctx)
    local q = ctx.quota
    if q then
        release_slot(q)
    end
    tokens.refund(ctx)
    if not q then
        return
    end
    local key = q.daily
    if key then
        q.daily = false
        limits.add(key, -1)
    end
    key = q.monthly
    if key then
        q.monthly = false
        limits.add(key, -1)
    end
end

-- log: whatever is still held.
function _M.release(ctx)
    local q = ctx.quota
    if q then
        release_slot(q)
    end
    tokens.reconcile(ctx)
end

return _M
