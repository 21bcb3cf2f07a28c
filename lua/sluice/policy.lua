-- A consumer's plan on the hot path: rate limit, concurrent requests, request
-- quotas, token quota (reservation, tokens.lua), in that order (cheapest refusal
-- first). Counters live in sluice_limits (see limits.lua for the algorithms). A
-- consumer without a plan is not limited.
local limits = require("sluice.limits")
local plans = require("sluice.plans")
local metrics = require("sluice.metrics")
local tokens = require("sluice.tokens")

local ngx = ngx
local ngx_var = ngx.var
local ngx_arg = ngx.arg
local ngx_header = ngx.header
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

-- Returns nil when the request may go on; else status, type, message, extra.
-- `llm`: the endpoint counts tokens (monthly_tokens applies).
function _M.check(ctx, snap, consumer, model_name, llm)
    local plan = consumer.plan_id and snap.plans[consumer.plan_id]
    if not plan then
        return nil
    end
    local lim = plans.limits(plan, model_name)
    local cid = consumer.key_id
    ctx.slot = false   -- checked: ngx.ctx now knows whether a slot is held

    local ok, remaining, reset, wait = limits.take("r:" .. cid .. lim.rate_scope,
                                                   lim.rate, lim.burst)
    if ok == nil then
        -- the dict is full or broken: serve rather than refuse everybody
        ngx_log(ERR, "rate limit unavailable, letting the request through: ", remaining)
    else
        ctx.rl_limit, ctx.rl_remaining, ctx.rl_reset = lim.burst, remaining, reset
        if not ok then
            return refuse("rate limit of plan " .. lim.name .. " exceeded ("
                          .. lim.rate .. " requests per second, burst " .. lim.burst .. ")",
                          wait, model_name, lim, "rate")
        end
    end

    if lim.concurrent then
        local key = "c:" .. cid
        local entered, err = limits.enter(key, lim.concurrent)
        if entered then
            ngx_var.sluice_concurrency = key   -- what the error page gives back
            ctx.slot = key
        elseif entered == nil then
            ngx_log(ERR, "concurrency limit unavailable: ", err)
        else
            return refuse("too many concurrent requests (plan " .. lim.name .. " allows "
                          .. lim.concurrent .. ")", 1, model_name, lim, "concurrent")
        end
    end

    local daily_key, monthly_key
    if lim.daily then
        local counted, info = limits.count("qd:" .. cid .. lim.daily_scope .. ":", "d",
                                           lim.daily)
        if counted == false then
            return refuse("daily request quota of plan " .. lim.name .. " used up ("
                          .. lim.daily .. " requests)", info, model_name, lim, "daily")
        elseif counted == nil then
            ngx_log(ERR, "daily quota unavailable: ", info)
        end
        daily_key = counted and info
    end
    if lim.monthly then
        local counted, info = limits.count("qm:" .. cid .. lim.monthly_scope .. ":", "m",
                                           lim.monthly)
        if counted == false then
            if daily_key then limits.uncount(daily_key) end
            return refuse("monthly request quota of plan " .. lim.name .. " used up ("
                          .. lim.monthly .. " requests)", info, model_name, lim, "monthly")
        elseif counted == nil then
            ngx_log(ERR, "monthly quota unavailable: ", info)
        end
        monthly_key = counted and info
    end
    if lim.tokens and llm and ctx.request_doc then
        local msg, retry_after = tokens.reserve(ctx, lim, cid, ctx.request_len,
                                                ctx.request_doc)
        if msg then
            if daily_key then limits.uncount(daily_key) end
            if monthly_key then limits.uncount(monthly_key) end
            return refuse(msg, retry_after, model_name, lim, "tokens")
        end
    end
    return nil
end

-- header_filter: X-RateLimit-* on every response of a limited consumer.
function _M.headers(ctx)
    if ctx.rl_limit then
        ngx_header["X-RateLimit-Limit"] = ctx.rl_limit
        ngx_header["X-RateLimit-Remaining"] = ctx.rl_remaining
        ngx_header["X-RateLimit-Reset"] = ctx.rl_reset
    end
end

-- The concurrency slot goes back as soon as the answer ends (before the caller has
-- its last byte, so its next request finds the slot free), else in the log phase.
-- ngx.ctx says what is held (no variable access) unless an error_page redirect
-- emptied it; then the variable does.
local function release_slot(ctx)
    local key = ctx and ctx.slot
    if key then
        ctx.slot = false
        return limits.leave(key)
    elseif key == false then
        return
    end
    key = ngx_var.sluice_concurrency
    if key and key ~= "" then
        ngx_var.sluice_concurrency = ""
        limits.leave(key)
    end
end

-- body_filter: watch for the backend's token usage when tokens are reserved.
function _M.body_filter(ctx)
    if ctx.usage_scan then
        tokens.body_filter(ctx)
    end
    if ngx_arg[2] then
        release_slot(ctx)
    end
end

-- error page: the request failed; give the slot and reserved tokens back now.
function _M.failed()
    release_slot(nil)
    tokens.refund()
end

-- log: whatever is still held.
function _M.release(ctx)
    release_slot(ctx)
    tokens.reconcile(ctx)
end

return _M
