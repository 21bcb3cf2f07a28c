-- Static-weight choice among a model's backends (weight > 0), smooth weighted
-- round-robin as in nginx's upstream module: per worker, deterministic, no
-- per-request allocation. One retry on a different backend after a connect error.
local ngx_balancer = require("ngx.balancer")

local ngx = ngx
local ngx_log = ngx.log
local ERR = ngx.ERR
local ngx_exit = ngx.exit
local set_current_peer = ngx_balancer.set_current_peer
local set_more_tries = ngx_balancer.set_more_tries
local set_timeouts = ngx_balancer.set_timeouts
local get_last_failure = ngx_balancer.get_last_failure
local min = math.min

local CONNECT_TIMEOUT = 5   -- seconds; the model's timeout_ms still caps it

local _M = {}

-- Index of the next backend in `pool`, skipping `exclude` (an index) and those whose
-- base_path differs from `base_path` (when given): a retry reuses the request nginx
-- already built, so its URI must fit the backend. Returns nil when none is eligible.
local function pick(pool, exclude, base_path)
    local backends, weights, current = pool.backends, pool.weights, pool.current
    local best, best_cw
    local total = 0
    for i = 1, pool.n do
        if i ~= exclude and (base_path == nil or backends[i].base_path == base_path) then
            local w = weights[i]
            local cw = current[i] + w
            current[i] = cw
            total = total + w
            if best == nil or cw > best_cw then
                best, best_cw = i, cw
            end
        end
    end
    if best then
        current[best] = best_cw - total
    end
    return best
end

local function has_alternative(pool, idx)
    local base_path = pool.backends[idx].base_path
    for i = 1, pool.n do
        if i ~= idx and pool.backends[i].base_path == base_path then
            return true
        end
    end
    return false
end

-- Access phase: choose the first backend. Returns it, or nil when the pool is empty.
function _M.choose(ctx, pool)
    local idx = pick(pool)
    if not idx then
        return nil
    end
    ctx.pool = pool
    ctx.backend_index = idx
    return pool.backends[idx]
end

-- Balancer phase.
function _M.balance(ctx, model)
    local pool = ctx.pool
    if not pool then
        ngx_log(ERR, "balancer reached without a chosen backend")
        return ngx_exit(500)
    end
    local idx = ctx.backend_index
    if ctx.tries then
        -- a retry: the previous backend failed to connect
        local state, code = get_last_failure()
        local backend = pool.backends[idx]
        ngx_log(ERR, "backend ", backend.name or backend.id, " (", backend.host, ":",
                backend.port, ") failed: ", state, " ", code, "; retrying another")
        idx = pick(pool, idx, backend.base_path) or idx
        ctx.backend_index = idx
        ctx.tries = ctx.tries + 1
    else
        ctx.tries = 1
        if has_alternative(pool, idx) then
            local ok, err = set_more_tries(1)
            if not ok then
                ngx_log(ERR, "failed to set more tries: ", err)
            end
        end
    end

    local b = pool.backends[idx]
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

return _M
