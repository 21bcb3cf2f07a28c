-- ES256 r || s -> DER (sluice/der.lua), against hand-encoded vectors.
local der = require("sluice.der")

local T = {}

local function hex(s)
    return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

local function bytes(h)
    return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end))
end

function T.int_minimal_positive()
    assert(hex(der.int(bytes("01"))) == "020101")
    assert(hex(der.int(bytes("7f"))) == "02017f")
    -- high bit set: a 0x00 keeps it non-negative
    assert(hex(der.int(bytes("80"))) == "02020080")
    assert(hex(der.int(bytes("ff01"))) == "020300ff01")
end

function T.int_strips_leading_zeros()
    assert(hex(der.int(bytes("000001"))) == "020101")
    assert(hex(der.int(bytes("000080"))) == "02020080")
    -- zero itself stays one byte
    assert(hex(der.int(bytes("0000"))) == "020100")
end

function T.ecdsa_sequence()
    local r = string.rep("\1", 32)
    local s = "\128" .. string.rep("\0", 31)
    local out = der.ecdsa(r .. s)
    -- SEQUENCE { INTEGER (32 bytes), INTEGER (0x00 + 32 bytes) }
    assert(out:byte(1) == 0x30 and out:byte(2) == 2 + 32 + 2 + 33, hex(out:sub(1, 2)))
    assert(hex(out:sub(3, 4)) == "0220" and out:sub(5, 36) == r)
    assert(hex(out:sub(37, 39)) == "022100" and out:sub(40) == s)
end

function T.ecdsa_short_values()
    local r = string.rep("\0", 31) .. "\5"
    local s = string.rep("\0", 30) .. "\1\2"
    assert(hex(der.ecdsa(r .. s)) == "3007" .. "020105" .. "02020102")
end

function T.ecdsa_wrong_length()
    assert(der.ecdsa(string.rep("\1", 63)) == nil)
    assert(der.ecdsa(string.rep("\1", 65)) == nil)
end

return T
