-- Smooth weighted round-robin (as nginx's upstream module): each eligible peer's
-- current weight grows by its effective weight, the largest wins and loses the total.
-- Over any window of sum(w) picks each peer is chosen w times, spread evenly. Pure
-- Lua (no ngx): unit-tested with plain luajit (tests/lua/test_swrr.lua).
--
-- `pool`: { n = count, eff = { weight... }, current = { 0... }, backends = {...} }.
local _M = {}

-- Index of the next peer, skipping indexes in `skip` (a set, or nil) and, when
-- `like` is given, peers for which `fits(like, backend)` is false. nil when none is
-- eligible (all weights 0 or skipped).
function _M.pick(pool, skip, like, fits)
    local backends, eff, current = pool.backends, pool.eff, pool.current
    local best, best_cw
    local total = 0
    for i = 1, pool.n do
        local w = eff[i]
        if w > 0 and (skip == nil or not skip[i])
           and (like == nil or fits(like, backends[i])) then
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

return _M
