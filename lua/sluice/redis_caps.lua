-- Cluster mode for a plan's daily caps on audio and image work (sluice.media_caps):
-- with Redis configured, limits.take_caps counts them in the Redis that the request
-- quotas use (sluice.redis_limits: its connection pool, failure handling and
-- settlement), so a consumer's cap holds across the fleet.
--
--   configure(opts)   init phase, after redis_limits.configure: when opts is set,
--                     limits.take_caps is replaced by the version below, which falls
--                     back to the shared-dict one when Redis fails (failure "open")
--
-- One round trip in access: COUNT, one script that INCRBYs each of the request's
-- counters (EXPIREAT the end of the UTC day + 60 s on creation) and, when one goes
-- over its cap, DECRBYs every counter it incremented back, refused. Settlement
-- (a failed answer, a transcript's real seconds) goes through limits.add, which
-- redis_limits batches per worker for the Redis keys ("sluice:" + the dict's key).
local limits = require("sluice.limits")
local redis_limits = require("sluice.redis_limits")
local metrics = require("sluice.metrics")

local ngx_time = ngx.time
local new_tab = require("table.new")
local unpack = unpack

local NS = redis_limits.NS

-- KEYS[i] counters; ARGV[3i - 2], ARGV[3i - 1], ARGV[3i]: amount, cap, expire at
-- (unix s). Returns 0 (admitted) or the KEYS index of the cap that refused.
local COUNT = redis_limits.script([[
for i = 1, #KEYS do
  local amount = tonumber(ARGV[3 * i - 2])
  local n = redis.call('INCRBY', KEYS[i], amount)
  if n == amount then redis.call('EXPIREAT', KEYS[i], ARGV[3 * i]) end
  if n > tonumber(ARGV[3 * i - 1]) then
    for j = 1, i do
      redis.call('DECRBY', KEYS[j], ARGV[3 * j - 2])
    end
    return i
  end
end
return 0
]])

local _M = {}

local local_take_caps

-- Redis failing: this gateway's own counters, or a refusal.
local function without_redis(keys, amounts, caps, ttl)
    if redis_limits.fails_open() then
        metrics.inc("sluice_redis_bypassed_total", #keys, "local")
        return local_take_caps(keys, amounts, caps, ttl)
    end
    return redis_limits.unavailable("daily cap")
end

-- limits.take_caps in one round trip (arguments and returns: limits.lua).
local function take_caps(keys, amounts, caps, ttl)
    local n = #keys
    if n == 0 then
        return nil
    end
    if not redis_limits.up() then
        return without_redis(keys, amounts, caps, ttl)
    end
    local expire = ngx_time() + ttl + 60
    local cmd = new_tab(4 * n, 0)
    for i = 1, n do
        cmd[i] = NS .. keys[i]
        local a = n + 3 * i - 2
        cmd[a], cmd[a + 1], cmd[a + 2] = amounts[i], caps[i], expire
    end
    local res, err = redis_limits.run(COUNT, n, unpack(cmd, 1, 4 * n))
    if not res then
        redis_limits.failed("caps", err)
        return without_redis(keys, amounts, caps, ttl)
    end
    if res ~= 0 then
        return res
    end
    for i = 1, n do
        keys[i] = cmd[i]   -- settled in Redis (limits.add)
    end
    return nil
end

-- Init phase. opts: nil (no Redis: nothing changes) or redis_limits.configure's.
function _M.configure(opts)
    if not opts then
        return
    end
    local_take_caps = limits.take_caps
    limits.take_caps = take_caps
end

return _M
