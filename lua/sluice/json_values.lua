-- What a decoded JSON value is, for the strict checks of every caller API
-- (sluice/strict.lua, strict_responses.lua, strict_anthropic.lua). Pure Lua (cjson
-- only); JSON null is taken as absent.
local cjson = require("cjson.safe")

local type = type
local next = next
local floor = math.floor

local NULL = cjson.null
local HUGE = math.huge

local _M = {}

function _M.absent(v)
    return v == nil or v == NULL
end

-- NaN and the infinities are no JSON numbers, but cjson can read them
local function is_number(v)
    return type(v) == "number" and v == v and v > -HUGE and v < HUGE
end
_M.is_number = is_number

function _M.is_int(v)
    return is_number(v) and floor(v) == v
end

-- A JSON array, for what cjson decoded (cjson decodes [] and {} alike: an empty table
-- passes as both). cjson makes an array's keys 1..n without holes (null is
-- cjson.null, not nil) and an object's keys strings, so looking at [1] is exact --
-- and no loop: a loop per message inside the access phase's trace makes LuaJIT
-- abort that trace, and after a few aborts interpret the phase for good.
function _M.is_array(v)
    return type(v) == "table" and (v[1] ~= nil or next(v) == nil)
end

function _M.is_object(v)
    return type(v) == "table" and v[1] == nil
end

-- doc[name], when present, is a number from lo to hi; else (param, message), the
-- param prefixed with `where` (e.g. "params.") when given
function _M.range(doc, name, lo, hi, where)
    local v = doc[name]
    if v == nil or v == NULL then
        return nil
    end
    if not is_number(v) or v < lo or v > hi then
        return (where or "") .. name, name .. " must be a number from " .. lo .. " to " .. hi
    end
end

return _M
