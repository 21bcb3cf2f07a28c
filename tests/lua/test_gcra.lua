-- GCRA (sluice/gcra.lua) against the token bucket it stands for: a bucket of `burst`
-- tokens refilled at `rate` per second, driven the way limits.take drives it (TAT
-- incremented by T from max(TAT, now); given back when refused).
local gcra = require("sluice.gcra")

local T = {}

-- One bucket under the update rule of limits.lua; times in ms.
local function bucket(rate, burst)
    local Ti, cap = gcra.params(rate, burst)
    local tat = 0
    return function(now)
        local new = math.max(tat, now) + Ti
        local admitted, remaining, reset, wait = gcra.decide(new - now, Ti, cap)
        if admitted then
            tat = new
        end
        return admitted, remaining, reset, wait
    end
end

function T.burst_then_refuse()
    local take = bucket(10, 5)           -- 10/s, 5 tokens
    for i = 1, 5 do
        local ok, remaining = take(0)
        assert(ok, "request " .. i .. " of the burst refused")
        assert(remaining == 5 - i, "remaining " .. remaining .. " after " .. i)
    end
    local ok, remaining, _, wait = take(0)
    assert(not ok and remaining == 0, "the 6th request at once must be refused")
    assert(wait == 1, "wait is at least one second, got " .. tostring(wait))
end

function T.refills_at_rate()
    local take = bucket(10, 5)
    for _ = 1, 5 do assert(take(0)) end
    assert(not take(50), "half an interval later: still empty")
    assert(take(100), "one interval (100 ms) later: one token back")
    assert(not take(100), "and only one")
end

function T.long_run_admits_rate_times_seconds_plus_burst()
    local take = bucket(100, 20)
    local admitted = 0
    for now = 0, 9999 do                  -- 10 s, one request per ms
        if take(now) then admitted = admitted + 1 end
    end
    -- 100/s for 10 s, plus the initial burst (one interval of slack at the end)
    assert(admitted >= 1000 + 20 - 1 and admitted <= 1000 + 20,
           "admitted " .. admitted)
end

function T.reset_counts_seconds_until_full()
    local take = bucket(1, 3)             -- 1/s, 3 tokens
    local _, _, reset = take(0)
    assert(reset == 1, "one token used: full again in 1 s, got " .. reset)
    take(0)
    _, _, reset = take(0)
    assert(reset == 3, "three used: full in 3 s, got " .. reset)
end

function T.params()
    local Ti, cap = gcra.params(4, 2)
    assert(Ti == 250 and cap == 500)
end

return T
