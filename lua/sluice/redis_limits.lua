-- Cluster mode: with Redis configured (SLUICE_REDIS_URL), rate limits and request /
-- token quotas are counted in one Redis shared by every gateway, so a plan holds
-- across the cluster instead of per gateway.
--
--   configure(opts)   init phase: when opts.redis is set, limits.take_all and
--                     limits.add are replaced by the versions below, which fall back
--                     to the shared-dict ones (captured here) when Redis fails
--
-- One round trip per request in access: TAKE, one EVALSHA (EVAL on NOSCRIPT) that
-- takes all of a request's limits atomically in Redis:
--   the bucket   the same GCRA token bucket as limits.lua, TAT in microseconds of
--                Redis's clock (TIME), so gateways with skewed clocks share one bucket;
--                refused -> nothing else is touched
--   counters     daily, monthly, tokens in that order: INCRBY, EXPIREAT the end of
--                the UTC day / month (+60 s) on creation; one over its limit -> every
--                counter this script incremented is DECRBY'd back (the rate token
--                stays taken, as with the shared dict), refused
-- and ADD, INCRBY on an existing counter only (token settlement).
-- Keys are the shared-dict keys under "sluice:"; the prefix also tells a Redis
-- counter from a local one when a reservation's key comes back to add().
-- Period keys use the gateway's own UTC day / month: gateways need synced clocks.
-- All of a request's keys go to one script: a single Redis (or a primary with
-- replicas), not Redis Cluster, whose slots would split them.
--
-- Cosockets only where nginx allows them: access (take_all) and the error page run
-- inline; settlements from body_filter or log are summed per counter in the worker
-- and sent every FLUSH_S from one ngx.timer.at.
--
-- Failure (connect/read timeout TIMEOUT_MS, refused, error reply): the gateway skips
-- Redis for RETRY_S (key "redis_down" in sluice_limits, for all its workers), then
-- tries again. Meanwhile, with failure = "open", this gateway's own shared-dict
-- counters decide (each gateway admits a full plan's worth); with "closed", limited
-- requests get 503 backend_unavailable. Either way sluice_redis_errors_total counts
-- the failures (op "rate" for TAKE: it always holds the rate limit, the first one),
-- sluice_redis_bypassed_total the limit decisions taken without Redis, and the error
-- log says so once per LOG_EVERY_S per worker.
-- Concurrency limits stay per gateway (see docs/contracts.md).
local limits = require("sluice.limits")
local metrics = require("sluice.metrics")
local new_tab = require("table.new")

local ngx = ngx
local ngx_now = ngx.now
local ngx_time = ngx.time
local ngx_log = ngx.log
local ngx_sha1_bin = ngx.sha1_bin
local get_phase = ngx.get_phase
local timer_at = ngx.timer.at
local ERR = ngx.ERR
local WARN = ngx.WARN
local fmt = string.format
local str_byte = string.byte
local str_sub = string.sub
local str_find = string.find
local str_gsub = string.gsub
local os_date = os.date
local tonumber = tonumber
local pairs = pairs
local type = type
local tostring = tostring
local ceil = math.ceil
local floor = math.floor
local max = math.max
local unpack = unpack

local dict = ngx.shared.sluice_limits

local NS = "sluice:"
local TIMEOUT_MS = 100      -- connect, send and read, each
local POOL_SIZE = 64        -- idle connections kept per worker
local IDLE_MS = 60000
local RETRY_S = 1           -- after a failure, decide without Redis this long
local LOG_EVERY_S = 10
local FLUSH_S = 0.05        -- settlements from body_filter / log wait at most this
local DOWN_KEY = "redis_down"

-- phases where cosockets work
local COSOCKET = { rewrite = true, access = true, content = true, timer = true }

local function script(src)
    local sha = str_gsub(ngx_sha1_bin(src), ".", function(c)
        return fmt("%02x", str_byte(c))
    end)
    return { src = src, sha = sha }
end

-- KEYS[1] the bucket, KEYS[2..n] counters. ARGV[1], ARGV[2]: T (us per token),
-- capacity (burst * T, us); then per counter i (ARGV[3i - 3 ..]): amount, limit,
-- expire at (unix s). Returns {refused, ahead}: refused 0 = admitted, else the KEYS
-- index of the limit that refused; ahead = max(TAT, now) + T - now in us.
local TAKE = script([[
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local T, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local ahead = tat + T - now
local ahead_s = string.format('%.0f', ahead)
if ahead > cap then
  return {1, ahead_s}
end
redis.call('SET', KEYS[1], string.format('%.0f', tat + T),
           'PX', math.max(1, math.ceil(ahead / 1000)))
for i = 2, #KEYS do
  local amount = tonumber(ARGV[3 * i - 3])
  local n = redis.call('INCRBY', KEYS[i], amount)
  if n == amount then redis.call('EXPIREAT', KEYS[i], ARGV[3 * i - 1]) end
  if n > tonumber(ARGV[3 * i - 2]) then
    for j = 2, i do
      redis.call('DECRBY', KEYS[j], ARGV[3 * j - 3])
    end
    return {i, ahead_s}
  end
end
return {0, ahead_s}
]])

-- KEYS[1] counter; ARGV[1] delta. A counter that has expired is left alone.
local ADD = script([[
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('INCRBY', KEYS[1], ARGV[1])
end
return false
]])

local _M = {}

metrics.register("sluice_redis_errors_total", "counter",
                 "Redis operations of the cluster-wide limits that failed (timeout, "
                 .. "refused, error reply), by operation.", { "op" })
metrics.register("sluice_redis_bypassed_total", "counter",
                 "Limit decisions taken without Redis while it was failing: by this "
                 .. "gateway's own counters (local) or refused with 503 (refused).",
                 { "outcome" })

-- set by configure (init phase), read-only afterwards
local redis_mod, host, port, db, user, password, fail_open
local pool_opts
local local_take_all, local_add

local log_after = 0         -- per worker: when the next outage line may be logged

local function failed(op, err)
    metrics.inc("sluice_redis_errors_total", 1, op)
    dict:set(DOWN_KEY, true, RETRY_S)
    local now = ngx_now()
    if now >= log_after then
        log_after = now + LOG_EVERY_S
        ngx_log(ERR, "redis ", host, ":", port, " failed (", op, ": ", tostring(err), "); ",
                fail_open and "limits fall back to this gateway's own counters"
                          or "limited requests are refused with 503",
                " for ", RETRY_S, " s at a time (logged at most every ", LOG_EVERY_S, " s)")
    end
end

-- One script run on a pooled connection. Returns the reply, or nil and an error.
local function run(s, nkeys, ...)
    local red = redis_mod:new()
    red:set_timeout(TIMEOUT_MS)
    local ok, err = red:connect(host, port, pool_opts)
    if not ok then
        return nil, "connect: " .. tostring(err)
    end
    if red:get_reused_times() == 0 then
        if password then
            if user then
                ok, err = red:auth(user, password)
            else
                ok, err = red:auth(password)
            end
            if not ok then
                red:close()
                return nil, "auth: " .. tostring(err)
            end
        end
        if db ~= 0 then
            ok, err = red:select(db)
            if not ok then
                red:close()
                return nil, "select: " .. tostring(err)
            end
        end
    end
    local res
    res, err = red:evalsha(s.sha, nkeys, ...)
    if res == false and str_find(err, "NOSCRIPT", 1, true) then
        -- first use on this Redis (or after a restart / SCRIPT FLUSH): EVAL loads it
        res, err = red:eval(s.src, nkeys, ...)
    end
    if res == nil then
        red:close()
        return nil, err
    end
    red:set_keepalive(IDLE_MS, POOL_SIZE)
    if res == false then
        return nil, err
    end
    return res
end

local function up()
    return not dict:get(DOWN_KEY)
end

-- Redis failing with failure = "closed": the request is refused (policy.check turns
-- this into its 503, phases sends it). Returns take_all's refusal: "unavailable",
-- the seconds until Redis is tried again, and the message.
local function unavailable(what)
    metrics.inc("sluice_redis_bypassed_total", 1, "refused")
    return "unavailable", RETRY_S, "the " .. what .. " cannot be checked: "
           .. "the cluster's limit store (Redis) is unavailable"
end

-- The counter key and seconds left in the current UTC day ("d") or month ("m"),
-- recomputed once a second per worker, as in limits.count.
local period_sec, day_str, day_ttl, month_str, month_ttl

local function period_key(prefix, period, now)
    if now ~= period_sec then
        period_sec = now
        day_str, day_ttl = os_date("!%Y%m%d", now), limits.to_next_day(now)
        month_str, month_ttl = os_date("!%Y%m", now), limits.to_next_month(now)
    end
    if period == "d" then
        return prefix .. day_str, day_ttl
    end
    return prefix .. month_str, month_ttl
end

-- Counter `i` (KEYS index >= 2) of TAKE's argument list `cmd` with `nkeys` keys.
-- Returns its key (as Redis names it) and seconds left in its period.
local function put_counter(cmd, nkeys, i, prefix, period, amount, limit, now)
    local key, ttl = period_key(prefix, period, now)
    key = NS .. key
    cmd[i] = key
    local a = nkeys + 3 * i - 3         -- ARGV[3i - 3], after the keys
    cmd[a], cmd[a + 1], cmd[a + 2] = amount, limit, now + ttl + 60
    return key, ttl
end

-- Redis failing: this gateway's own counters, or a refusal (unavailable).
local function without_redis(req, nkeys)
    if fail_open then
        metrics.inc("sluice_redis_bypassed_total", nkeys, "local")
        return local_take_all(req)
    end
    return unavailable("rate limit")
end

-- limits.take_all in one round trip (`req`, returns: see limits.lua).
local function take_all(req)
    local daily, monthly, tokens = req.daily, req.monthly, req.tokens
    local nkeys = 1 + (daily and 1 or 0) + (monthly and 1 or 0) + (tokens and 1 or 0)
    if not up() then
        return without_redis(req, nkeys)
    end
    local now = ngx_time()
    local T = max(1, floor(1e6 / req.rate + 0.5))
    local cap = req.burst * T
    local n = 4 * nkeys - 1            -- keys, T and cap, 3 per counter
    local cmd = new_tab(n, 0)
    cmd[1] = NS .. req.rate_key
    cmd[nkeys + 1], cmd[nkeys + 2] = fmt("%.0f", T), fmt("%.0f", cap)
    local i, daily_i, monthly_i, token_key, day_left, month_left = 1
    local daily_key, monthly_key
    if daily then
        i = i + 1
        daily_i = i
        daily_key, day_left = put_counter(cmd, nkeys, i, req.daily_prefix, "d", 1, daily, now)
    end
    if monthly then
        i = i + 1
        monthly_i = i
        monthly_key, month_left = put_counter(cmd, nkeys, i, req.monthly_prefix, "m", 1,
                                              monthly, now)
    end
    if tokens then
        token_key, month_left = put_counter(cmd, nkeys, i + 1, req.tokens_prefix, "m",
                                            req.reserve, tokens, now)
    end

    local res, err = run(TAKE, nkeys, unpack(cmd, 1, n))
    if not res then
        failed("rate", err)
        return without_redis(req, nkeys)
    end
    local refused, ahead = res[1], tonumber(res[2])
    if refused == 1 then
        req.remaining, req.reset = 0, ceil((ahead - T) / 1e6)
        return "rate", max(1, ceil((ahead - cap) / 1e6))
    end
    req.remaining, req.reset = floor((cap - ahead) / T), ceil(ahead / 1e6)
    if refused == 0 then
        req.token_key = token_key
        req.daily_key, req.monthly_key = daily_key, monthly_key
        return nil
    elseif refused == daily_i then
        return "daily", day_left
    elseif refused == monthly_i then
        return "monthly", month_left
    end
    return "tokens", month_left
end

local function settle_now(key, delta)
    local res, err = run(ADD, 1, key, delta)
    if res == nil and err then
        failed("settle", err)
    end
end

-- Settlements from body_filter / log: summed per counter in this worker and sent
-- every FLUSH_S from one timer, so a busy consumer costs one ADD per FLUSH_S rather
-- than a timer and a round trip per request. Also runs when premature (worker
-- shutting down): cosockets still work there.
local pending, flush_scheduled = {}, false

local function flush()
    flush_scheduled = false
    local batch = pending
    pending = {}
    local live = up()      -- while Redis is failing, drop them (counted) without waiting
    for key, delta in pairs(batch) do
        if delta ~= 0 then
            if live then
                settle_now(key, delta)
            else
                metrics.inc("sluice_redis_errors_total", 1, "settle")
            end
        end
    end
end

-- Add `delta` to a Redis counter: inline where cosockets work, else batched.
local function settle(key, delta)
    if COSOCKET[get_phase()] then
        return settle_now(key, delta)
    end
    pending[key] = (pending[key] or 0) + delta
    if not flush_scheduled then
        local ok, err = timer_at(FLUSH_S, flush)
        if not ok then
            metrics.inc("sluice_redis_errors_total", 1, "settle")
            ngx_log(WARN, "redis settlements delayed: ", err)   -- the next one retries
            return
        end
        flush_scheduled = true
    end
end

local function is_redis_key(key)
    return str_sub(key, 1, #NS) == NS
end

local function add(key, delta)
    if is_redis_key(key) then
        return settle(key, delta)
    end
    return local_add(key, delta)
end

-- Init phase. opts: nil (no Redis: nothing changes) or
-- { host, port, db, user, password, failure = "open" | "closed" }.
function _M.configure(opts)
    if not opts then
        return
    end
    if type(opts.host) ~= "string" or type(opts.port) ~= "number" then
        error("redis options need host and port", 2)
    end
    if opts.failure ~= "open" and opts.failure ~= "closed" then
        error("redis failure must be open or closed", 2)
    end
    local ok, mod = pcall(require, "resty.redis")      -- OpenResty's name
    if not ok then
        mod = require("nginx.redis")                    -- Debian's lua-nginx-redis
    end
    redis_mod = mod
    host, port, db = opts.host, opts.port, opts.db or 0
    user, password = opts.user, opts.password
    fail_open = opts.failure == "open"
    pool_opts = { pool = "sluice-redis:" .. host .. ":" .. port .. ":" .. db }
    local_take_all, local_add = limits.take_all, limits.add
    limits.take_all, limits.add = take_all, add
end

_M.NS = NS
_M.RETRY_S = RETRY_S
-- for sluice.redis_caps: a script run, a failure noted, a refusal when failing closed
_M.script, _M.run, _M.failed, _M.up, _M.unavailable = script, run, failed, up, unavailable
function _M.fails_open() return fail_open end

return _M
