-- Numbers as the text a header, a variable or the log line carries, the small whole
-- ones made once per worker: tostring() of a number (and a number put into a
-- string.buffer) goes through LuaJIT's general "%.14g" formatter and makes a new
-- string, ~250 instructions each, several times per request (statuses, milliseconds,
-- token counts, X-RateLimit-* values). Pure: runs under plain luajit
-- (tests/lua/test_accesslog.lua).
local tostring = tostring
local type = type
local floor = math.floor

local MAX = 65535   -- whole numbers 0..MAX are kept once made
local made = {}

local _M = {}

-- `v` as text: a number as tostring() writes it, a string as it is, nil as "".
function _M.of(v)
    if type(v) ~= "number" then
        return v == nil and "" or v
    end
    local s = made[v]
    if s then
        return s
    end
    s = tostring(v)
    if v >= 0 and v <= MAX and v == floor(v) then
        made[v] = s
    end
    return s
end

return _M
