-- One public model served by backends of several protocols (brief 000: one ASR model,
-- three vendors of three shapes): for audio and image work, each request picks one
-- of the model's pools by their live effective weights (controller weight x health,
-- 0 while a backend's circuit is open: sluice.balancer), so the vendors share the
-- traffic by weight and a vendor whose circuits are all open gets none until they
-- close. Within the pool the balancer picks the backend and retries as for any model.
-- A pool that cannot take the endpoint (a vendor mapping without an `upload` for an
-- upload) is left out.
local balancer = require("sluice.balancer")

local ngx_now = ngx.now
local random = math.random

local _M = {}

local function takes(pool, endpoint)
    local protocol = pool.protocol
    if protocol == "openai" then
        return true
    end
    local mapping = protocol == "vendor" and pool.mapping
    return mapping and (not endpoint.upload or mapping.upload ~= nil) or false
end

-- Access step: the pool of compiled `model` for media `endpoint` (several pools), by
-- weight, never `skip` (a vendor that just failed: sluice.fallback); nil when none
-- can take the endpoint. `moved`: ctx.target.moved.
local function pick(model, endpoint, moved, skip)
    local order, pools = model.pool_order, model.pools
    local now = ngx_now()
    local total, first = 0, nil
    local sums = {}
    for i = 1, #order do
        local pool = pools[order[i]]
        local sum = 0
        if pool ~= skip and takes(pool, endpoint) then
            first = first or pool
            balancer.refresh(pool, now, moved)
            local eff = pool.eff
            for j = 1, pool.n do
                sum = sum + eff[j]
            end
        end
        sums[i] = sum
        total = total + sum
    end
    if total <= 0 then
        return first   -- every circuit open: the balancer says so (503, retry_after)
    end
    local r = random() * total
    for i = 1, #order do
        r = r - sums[i]
        if sums[i] > 0 and r < 0 then
            return pools[order[i]]
        end
    end
    return first
end

function _M.pool(model, endpoint, moved)
    return pick(model, endpoint, moved, nil)
end

-- @sluice_fallback: another pool than `failed` for a retry of media `endpoint`, by
-- weight (nil: none other takes it).
function _M.other(model, endpoint, failed)
    return pick(model, endpoint, nil, failed)
end

return _M
