-- Structural equality of decoded JSON values (tables from cjson, cjson.null, scalars),
-- for config.lua's compile to reuse what did not change between two snapshots. Pure
-- Lua (no ngx): unit-tested with plain luajit (tests/lua/test_same.lua).
local type = type
local pairs = pairs
local next = next

local _M = {}

local function same(a, b)
    if a == b then
        return true
    end
    if type(a) ~= "table" or type(b) ~= "table" then
        return false
    end
    for k, v in pairs(a) do
        local w = b[k]
        if w == nil or not same(v, w) then
            return false
        end
    end
    for k in pairs(b) do
        if a[k] == nil then
            return false
        end
    end
    return getmetatable(a) == getmetatable(b)   -- cjson's array marker, if any
end
_M.same = same

-- Is `t` (a table or nil) empty?
function _M.empty(t)
    return t == nil or next(t) == nil
end

return _M
