-- nginx's times in seconds with three decimals ($upstream_response_time and its
-- kin: "0.012"; "-" for an attempt that got none) as whole milliseconds.
-- tonumber() parses a fraction with LuaJIT's exact decimal scanner, about 1,000
-- instructions a call (bench/instructions.py, with symbols); the digits read as
-- bytes cost a few dozen. Pure: runs under plain luajit (tests/lua).
local str_byte = string.byte
local str_find = string.find
local str_sub = string.sub
local tonumber = tonumber

local ZERO = 48   -- "0"

local _M = {}

-- "S.mmm" -> S * 1000 + mmm; any other shape through tonumber (nil: not a number).
function _M.ms(s)
    local dot = str_find(s, ".", 1, true)
    if dot and dot == #s - 3 then
        local a, b, c = str_byte(s, dot + 1, dot + 3)
        a, b, c = a - ZERO, b - ZERO, c - ZERO
        if a >= 0 and a <= 9 and b >= 0 and b <= 9 and c >= 0 and c <= 9 then
            local sec
            if dot == 2 then
                sec = str_byte(s, 1) - ZERO
                if sec < 0 or sec > 9 then
                    sec = nil
                end
            else
                sec = tonumber(str_sub(s, 1, dot - 1))
            end
            if sec then
                return sec * 1000 + a * 100 + b * 10 + c
            end
        end
    end
    local n = tonumber(s)
    return n and n * 1000
end

return _M
