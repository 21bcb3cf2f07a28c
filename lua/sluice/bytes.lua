-- Byte scans of what a request brings (its URI, its key): one pass each over the
-- bytes, which LuaJIT compiles (a plain string.find per character class costs
-- several times as much; a pattern find is not compiled at all). Pure: runs under
-- plain luajit (tests/lua/test_bytes.lua).
local ffi = require("ffi")

local ffi_cast = ffi.cast
local str_sub = string.sub

local U8 = ffi.typeof("const uint8_t *")
local SPACE, HASH, PERCENT, DOT, SLASH, QUESTION = 32, 35, 37, 46, 47, 63
local TAB, CR = 9, 13   -- \t \n \v \f \r are 9 to 13

local _M = {}

-- The path of `raw` ($request_uri) when it is byte for byte what nginx makes of it
-- in $uri: no %-escape, no "//", "/." or "#" to normalise, no space; else nil.
-- Such a request reaches a backend at its own path with proxy_pass's URI unchanged
-- (sluice.steps.forward).
function _M.plain_path(raw)
    local n = #raw
    local p = ffi_cast(U8, raw)
    for i = 0, n - 1 do
        local b = p[i]
        if b == QUESTION then
            return str_sub(raw, 1, i)
        elseif b == PERCENT or b == HASH or b == SPACE then
            return nil
        elseif b == SLASH then
            local nb = p[i + 1]   -- the string's terminating NUL past the end
            if nb == SLASH or nb == DOT then
                return nil
            end
        end
    end
    return raw
end

-- Does `s` hold whitespace (Lua's %s: space, \t, \n, \v, \f, \r)?
function _M.has_space(s)
    local p = ffi_cast(U8, s)
    for i = 0, #s - 1 do
        local b = p[i]
        if b == SPACE or (b >= TAB and b <= CR) then
            return true
        end
    end
    return false
end

return _M
