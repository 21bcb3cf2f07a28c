-- Byte scans of what a request brings (its URI, its key, its body, the variables
-- nginx joins for it): one pass each over the
-- bytes, which LuaJIT compiles (a plain string.find per character class costs
-- several times as much; a pattern find is not compiled at all). Pure: runs under
-- plain luajit (tests/lua/test_bytes.lua).
local ffi = require("ffi")
local bit = require("bit")

local ffi_cast = ffi.cast
local band = bit.band
local rshift = bit.rshift
local str_find = string.find
local str_sub = string.sub

-- libc's memmem (declared here unless another module has: a second cdef would fail)
pcall(ffi.cdef, "void *memmem(const void *h, size_t hlen, const void *n, size_t nlen);")
local C = ffi.C
local tonumber = tonumber

local CHARS = ffi.typeof("const char *")
local U8 = ffi.typeof("const uint8_t *")
local U64 = ffi.typeof("const uint64_t *")
local HIGH_BITS = 0x8080808080808080ULL   -- the top bit of each of 8 bytes
local NONE = 0ULL
local SPACE, HASH, PERCENT, DOT, SLASH, QUESTION = 32, 35, 37, 46, 47, 63
local QUOTE, OPEN_BRACKET, BACKSLASH, OPEN_BRACE = 34, 91, 92, 123
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

-- Is `s` all ASCII (no byte above 0x7f)? Then it is valid UTF-8 and the PCRE check
-- (sluice.target) is not needed. Eight bytes at a time (a JSON body is mostly
-- ASCII): ~8 times fewer steps than PCRE's own UTF-8 scan, and no regex call.
function _M.ascii(s)
    local n = #s
    local words = rshift(n, 3)
    local w = ffi_cast(U64, s)
    for i = 0, words - 1 do
        if band(w[i], HIGH_BITS) ~= NONE then
            return false
        end
    end
    local b = ffi_cast(U8, s)
    for i = words * 8, n - 1 do
        if b[i] > 127 then
            return false
        end
    end
    return true
end

-- The number of '"' in `s`, or nil when `s` holds a "{", "[" or "\\": the inside of
-- a JSON object is flat (no nested object or array, no escape) when this is a number
-- (sluice.scan). One pass, instead of a plain find per quote and per character.
function _M.flat_quotes(s)
    local p = ffi_cast(U8, s)
    local quotes = 0
    for i = 0, #s - 1 do
        local b = p[i]
        if b == QUOTE then
            quotes = quotes + 1
        elseif b == OPEN_BRACE or b == OPEN_BRACKET or b == BACKSLASH then
            return nil
        end
    end
    return quotes
end

-- string.find(s, needle, init, true), by libc's memmem: the first index at or after
-- `init` (1 when nil; at least 1) where `needle` starts, and where it ends; nil when
-- it is not there. LuaJIT's own plain find calls memchr and memcmp at every byte
-- that begins the needle: for a needle starting with '"' in a JSON text, at every
-- quote (~2,000 instructions to find "usage" in a short chat answer).
function _M.find(s, needle, init)
    init = init or 1
    local n = #s
    if init > n + 1 then
        return nil
    end
    local base = ffi_cast(CHARS, s)
    local at = C.memmem(base + (init - 1), n - init + 1, needle, #needle)
    if at == nil then
        return nil
    end
    local i = tonumber(ffi_cast(CHARS, at) - base) + 1
    return i, i + #needle - 1
end

-- The first three fields of `s`, newline-separated, each nil when empty: the maps of
-- nginx.conf.tmpl that join several variables into one (one lookup by name from Lua
-- instead of one per variable; a newline is in no request line, header or status).
function _M.fields(s)
    local a = str_find(s, "\n", 1, true)
    if not a then
        return s ~= "" and s or nil
    end
    local first = a > 1 and str_sub(s, 1, a - 1) or nil
    local b = str_find(s, "\n", a + 1, true)
    if not b then
        return first, a < #s and str_sub(s, a + 1) or nil
    end
    return first, b > a + 1 and str_sub(s, a + 1, b - 1) or nil,
           b < #s and str_sub(s, b + 1) or nil
end

return _M
