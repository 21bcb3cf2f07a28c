-- One counter in the sluice_config dict that moves whenever shared state a worker
-- caches from moves: the snapshot (config.lua), the weight table (weights.lua), a
-- circuit (breaker.lua), pushed health (health.lua). Each of them bumps it after
-- its own generation. A public request reads it once (config.get, first in
-- access; kept in ctx.target.moved) and hands it to the caches behind it (a pool's
-- effective weights, the weight table), which look at their own generations only
-- when it moved: one shared-dict read per request instead of five.
--
-- A cache stamped with a count read before its own generations were read is at
-- least that fresh; a caller without a count passes nil and the cache checks.
local dict = ngx.shared.sluice_config

local KEY = "moved"

local _M = {}

-- After a writer's own state and generation: every worker looks again.
function _M.bump()
    dict:incr(KEY, 1, 0)
end

function _M.read()
    return dict:get(KEY) or 0
end

return _M
