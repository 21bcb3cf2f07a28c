-- Rate limits, concurrency limits and request quotas, in the sluice_limits shared
-- dict: atomic across the workers of one gateway.
--
-- Rate: a token bucket (rate r per second, capacity b) computed as GCRA, the
-- "generic cell rate algorithm". A bucket is one number, its theoretical arrival
-- time TAT (ms): the instant at which the bucket would be full again. With the
-- emission interval T = 1000 / r, a request at `now` is admitted when
--
--     max(TAT, now) + T - now <= b * T          and then TAT := max(TAT, now) + T
--
-- which is exactly a bucket of b tokens refilled at r per second. The update must be
-- atomic: two workers reading TAT and writing it back would both admit on the last
-- token (lua-resty-limit-traffic's req.lua carries a FIXME for that race). Here it is
-- done with shdict primitives that are atomic on their own:
--
--   1. TAT := incr(key, T, init = now, init_ttl = T): one atomic read-modify-write.
--      The max(TAT, now) comes from the key's expiry: the key lives exactly until
--      TAT, so a bucket whose TAT has passed is gone and incr re-creates it at now.
--   2. TAT - now <= b * T: admitted; expire(key, TAT - now) moves the expiry along.
--   3. otherwise rejected: incr(key, -T) gives the token back.
--
-- Honest leftovers: (a) between 1 and 3 a rejected request holds a token for a few
-- microseconds, so under overload a concurrent request can be refused although the
-- final count would have let it in (never the other way round); (b) two admits that
-- run step 2 out of order can set the expiry up to one T per concurrent admit too
-- early, giving that many extra tokens once the bucket has drained.
--
-- Concurrency: incr/decr of an in-flight counter; the log phase gives the slot back
-- (also after error_page's internal redirect: ctx.quota.slot, sluice/context.lua).
-- FIXME: a worker that dies mid-request leaks its slots until the dict is flushed.
--
-- Quotas: one counter per consumer, scope and UTC day or month, incremented before
-- forwarding and given back when the request is refused later in access (token
-- quotas: see tokens.lua).
--
-- take_all(req) takes every limit of one request (policy.check builds `req`): here
-- one call of take / count per limit. Cluster mode (Redis configured):
-- redis_limits.lua replaces take_all and add with Redis-backed versions shared by
-- every gateway (one round trip per request); these stay its fallback.
local ngx = ngx
local ngx_now = ngx.now
local ngx_time = ngx.time
local ngx_log = ngx.log
local ERR = ngx.ERR
local max = math.max
local os_date = os.date

local gcra = require("sluice.gcra")
local dict = ngx.shared.sluice_limits

local DAY = 86400

local _M = {}

-- Seconds until the next UTC midnight / first of the next month.
local function to_next_day(now)
    return DAY - now % DAY
end

local function to_next_month(now)
    local t = os_date("!*t", now)
    local y, m = t.year, t.month + 1
    if m == 13 then
        y, m = y + 1, 1
    end
    return os.time({ year = y, month = m, day = 1, hour = 0 }) - os.time(os_date("!*t", now))
end

-- Take one token from bucket `key`. Returns admitted (bool), remaining tokens,
-- seconds until the bucket is full again, and (when refused) seconds to wait.
function _M.take(key, rate, burst)
    local now = ngx_now() * 1000
    local T, cap = gcra.params(rate, burst)
    local tat, err = dict:incr(key, T, now, max(T, 1) / 1000)
    if not tat then
        return nil, err
    end
    local ahead = tat - now
    local admitted, remaining, reset, wait = gcra.decide(ahead, T, cap)
    if admitted then
        dict:expire(key, max(ahead, 1) / 1000)
    else
        dict:incr(key, -T)
    end
    return admitted, remaining, reset, wait
end

-- One more in-flight request under `key`, unless `limit` are already running.
function _M.enter(key, limit)
    local n, err = dict:incr(key, 1, 0)
    if not n then
        return nil, err
    end
    if n > limit then
        dict:incr(key, -1)
        return false
    end
    return true
end

function _M.leave(key)
    dict:incr(key, -1, 1)
end

-- Count `amount` (default 1) against quota `limit` for the current day ("d") or
-- month ("m").
-- Returns true and the counter's key (for uncount), or false and seconds until the
-- period ends, or nil and an error.
-- the current UTC day and month as key suffixes with their remaining seconds,
-- recomputed once a second per worker (os.date and os.time are not cheap)
local period_sec, day_str, day_ttl, month_str, month_ttl

function _M.count(prefix, period, limit, amount)
    amount = amount or 1
    local now = ngx_time()
    if now ~= period_sec then
        period_sec = now
        day_str, day_ttl = os_date("!%Y%m%d", now), to_next_day(now)
        month_str, month_ttl = os_date("!%Y%m", now), to_next_month(now)
    end
    local key, ttl
    if period == "d" then
        key, ttl = prefix .. day_str, day_ttl
    else
        key, ttl = prefix .. month_str, month_ttl
    end
    local n, err = dict:incr(key, amount, 0, ttl + 60)
    if not n then
        return nil, err
    end
    if n > limit then
        dict:incr(key, -amount)
        return false, ttl
    end
    return true, key
end

local function uncount(key)
    dict:incr(key, -1)
end
_M.uncount = uncount

-- Take the limits of one request, in order: the rate bucket, then the daily, monthly
-- and token counters (each only when `req` has it). `req` (policy.check):
--   rate_key, rate, burst                  always
--   daily_prefix, daily                    daily request quota (prefix, limit)
--   monthly_prefix, monthly                monthly request quota
--   tokens_prefix, tokens, reserve         monthly token quota, tokens to reserve
-- Sets req.remaining and req.reset (the bucket after this request; unset when the
-- bucket could not be read), req.token_key (the reservation's counter, for
-- settlement) and req.daily_key, req.monthly_key (the request quotas' counters this
-- request counted on, for limits.add(key, -1) when it is buffered as a job or a job's
-- run is refused for saturation: policy.undo). Returns nil when admitted, else the
-- limit that refused ("rate", "daily", "monthly", "tokens") and seconds to wait. A
-- later refusal gives back the quotas already counted (the rate token stays taken). A
-- broken dict (full) lets the limit through rather than refuse everybody. (Cluster
-- mode adds "unavailable", seconds to wait and a message: redis_limits.lua.)
function _M.take_all(req)
    local ok, remaining, reset, wait = _M.take(req.rate_key, req.rate, req.burst)
    if ok == nil then
        ngx_log(ERR, "rate limit unavailable, letting the request through: ", remaining)
    else
        req.remaining, req.reset = remaining, reset
        if not ok then
            return "rate", wait
        end
    end

    local daily_key, monthly_key
    if req.daily then
        local counted, info = _M.count(req.daily_prefix, "d", req.daily, 1)
        if counted == false then
            return "daily", info
        elseif counted == nil then
            ngx_log(ERR, "daily quota unavailable: ", info)
        end
        daily_key = counted and info
    end
    if req.monthly then
        local counted, info = _M.count(req.monthly_prefix, "m", req.monthly, 1)
        if counted == false then
            if daily_key then uncount(daily_key) end
            return "monthly", info
        elseif counted == nil then
            ngx_log(ERR, "monthly quota unavailable: ", info)
        end
        monthly_key = counted and info
    end
    if req.tokens then
        local counted, info = _M.count(req.tokens_prefix, "m", req.tokens, req.reserve)
        if counted == false then
            if daily_key then uncount(daily_key) end
            if monthly_key then uncount(monthly_key) end
            return "tokens", info
        elseif counted == nil then
            ngx_log(ERR, "token quota unavailable: ", info)
        else
            req.token_key = info
        end
    end
    req.daily_key, req.monthly_key = daily_key, monthly_key
    return nil
end

-- Count `amounts[i]` on daily counter `keys[i]` (a plan's caps on audio and image
-- work: sluice.media_caps) against `caps[i]`, all or none; `ttl`: seconds to the end
-- of the UTC day. Returns nil when admitted (a counter the dict could not count is
-- set to false in `keys`: nothing held on it), else the index that refused. (Cluster
-- mode: the counters in Redis, their keys renamed in `keys`; "unavailable", seconds
-- to wait and a message when Redis fails closed: sluice.redis_caps.)
function _M.take_caps(keys, amounts, caps, ttl)
    for i = 1, #keys do
        local total, err = dict:incr(keys[i], amounts[i], 0, ttl + 60)
        if not total then
            ngx_log(ERR, "daily cap unavailable: ", err)
            keys[i] = false
        elseif total > caps[i] then
            for j = 1, i do
                if keys[j] then dict:incr(keys[j], -amounts[j]) end
            end
            return i
        end
    end
    return nil
end

-- Settle a counter (token reconciliation); a key that has expired is left alone.
function _M.add(key, delta)
    dict:incr(key, delta)
end

_M.to_next_day = to_next_day
_M.to_next_month = to_next_month

return _M
