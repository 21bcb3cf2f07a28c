-- sluice.nginx_time: nginx's "S.mmm" seconds as milliseconds, equal to tonumber's
-- reading for every shape nginx writes, nil for what is not a time.
local nginx_time = require("sluice.nginx_time")

local T = {}

function T.three_decimals_read_as_milliseconds()
    assert(nginx_time.ms("0.012") == 12)
    assert(nginx_time.ms("0.000") == 0)
    assert(nginx_time.ms("1.500") == 1500)
    assert(nginx_time.ms("9.999") == 9999)
    assert(nginx_time.ms("12.034") == 12034)
    assert(nginx_time.ms("120.001") == 120001)
end

function T.the_same_as_tonumber_over_a_range()
    for ms = 0, 30000, 7 do
        local s = string.format("%d.%03d", math.floor(ms / 1000), ms % 1000)
        local want = math.floor(tonumber(s) * 1000 + 0.5)
        assert(nginx_time.ms(s) == want, s)
    end
end

function T.other_shapes_go_through_tonumber()
    assert(nginx_time.ms("-") == nil)
    assert(nginx_time.ms("") == nil)
    assert(nginx_time.ms("0.5") == 500)
    assert(nginx_time.ms("2") == 2000)
    assert(nginx_time.ms("0.0x1") == nil)
    assert(nginx_time.ms("a.123") == nil)
    assert(nginx_time.ms("0.12a") == nil)
end

return T
