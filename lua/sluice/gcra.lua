-- The decision of the GCRA token bucket (see limits.lua for how the theoretical
-- arrival time TAT is kept atomically in a shared dict). Pure Lua (no ngx):
-- unit-tested with plain luajit (tests/lua/test_gcra.lua).
--
-- With emission interval T = 1000 / rate (ms) and capacity cap = burst * T, a request
-- whose incremented TAT (max(TAT, now) + T) lies `ahead` ms past now is admitted
-- when ahead <= cap.
local floor = math.floor
local ceil = math.ceil
local max = math.max

local _M = {}

-- Emission interval (ms) and capacity (ms) of a bucket of `burst` tokens at `rate`/s.
function _M.params(rate, burst)
    local T = 1000 / rate
    return T, burst * T
end

-- `ahead`: TAT after this request's increment minus now (ms). Returns admitted,
-- remaining tokens, seconds until the bucket is full again, and (when refused)
-- seconds to wait before a token is free.
function _M.decide(ahead, T, cap)
    if ahead <= cap then
        return true, floor((cap - ahead) / T), ceil(ahead / 1000)
    end
    local wait = (ahead - cap) / 1000
    return false, 0, ceil((ahead - T) / 1000), max(1, ceil(wait))
end

return _M
