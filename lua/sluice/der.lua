-- ES256 signatures in a JWS are r || s (32 bytes each); OpenSSL wants DER:
-- SEQUENCE { INTEGER r, INTEGER s }, each minimal and non-negative. Pure Lua (no
-- ngx): unit-tested with plain luajit (tests/lua/test_der.lua).
local str_sub = string.sub
local str_byte = string.byte
local str_char = string.char

local _M = {}

-- One DER INTEGER of the unsigned big-endian bytes `x`.
function _M.int(x)
    local i = 1
    while i < #x and str_byte(x, i) == 0 do
        i = i + 1
    end
    x = str_sub(x, i)
    if str_byte(x, 1) >= 0x80 then
        x = "\0" .. x
    end
    return "\2" .. str_char(#x) .. x
end

-- The DER form of a 64-byte r || s signature, or nil for any other length.
function _M.ecdsa(raw)
    if #raw ~= 64 then
        return nil
    end
    local body = _M.int(str_sub(raw, 1, 32)) .. _M.int(str_sub(raw, 33, 64))
    return "\48" .. str_char(#body) .. body
end

return _M
