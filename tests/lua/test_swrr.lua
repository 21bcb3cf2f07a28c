-- Smooth weighted round-robin (sluice/swrr.lua): nginx's sequence, exact shares over
-- a window, skips and the interchangeable filter.
local swrr = require("sluice.swrr")

local T = {}

local function pool(weights)
    local p = { n = #weights, eff = {}, current = {}, backends = {} }
    for i, w in ipairs(weights) do
        p.eff[i], p.current[i] = w, 0
        p.backends[i] = { id = i, group = i % 2 }
    end
    return p
end

function T.nginx_sequence()
    -- nginx's documented example: weights a=5, b=1, c=1 -> a a b a c a a
    local seq = {}
    local p = pool({ 5, 1, 1 })
    for k = 1, 7 do
        local i = swrr.pick(p)
        seq[k] = ("abc"):sub(i, i)
    end
    assert(table.concat(seq) == "aabacaa", "got " .. table.concat(seq))
end

function T.exact_shares_per_window()
    local weights = { 7, 3, 0, 10 }
    local p = pool(weights)
    for _ = 1, 5 do                       -- five windows of sum(w) = 20 picks
        local count = { 0, 0, 0, 0 }
        for _ = 1, 20 do
            local i = swrr.pick(p)
            count[i] = count[i] + 1
        end
        for i, w in ipairs(weights) do
            assert(count[i] == w, "backend " .. i .. ": " .. count[i] .. " of " .. w)
        end
    end
end

function T.smooth_no_long_runs()
    local p = pool({ 1, 1, 1, 1 })
    local last
    for _ = 1, 40 do
        local i = swrr.pick(p)
        assert(i ~= last, "equal weights alternate")
        last = i
    end
end

function T.skip_and_drained()
    local p = pool({ 5, 5 })
    for _ = 1, 10 do
        assert(swrr.pick(p, { [1] = true }) == 2)
    end
    assert(swrr.pick(p, { [1] = true, [2] = true }) == nil, "all skipped: nil")
    assert(swrr.pick(pool({ 0, 0 })) == nil, "all drained: nil")
end

function T.like_filter()
    local p = pool({ 1, 1, 1, 1 })
    local function same_group(a, b) return a.group == b.group end
    for _ = 1, 10 do
        local i = swrr.pick(p, nil, p.backends[2], same_group)
        assert(p.backends[i].group == 0, "only backends like the given one")
    end
end

return T
