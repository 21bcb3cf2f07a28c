-- Bounded scans of JSON text that avoid decoding a whole document on the hot path.
-- Each either returns what a full decode would give, or nil: the caller then decodes
-- (a scan never guesses). Pure Lua (no ngx): unit-tested with plain luajit against
-- cjson's decode of the same texts (tests/lua/test_scan.lua).
local bytes = require("sluice.bytes")

local find = bytes.find   -- plain find by memmem (see there)
local flat_quotes = bytes.flat_quotes

local str_find = string.find
local str_sub = string.sub
local str_byte = string.byte
local ipairs = ipairs

local _M = {}

local COUNTS = { "prompt_tokens", "completion_tokens", "total_tokens" }
local KEY = {}      -- name -> '"name"', the member's key as it appears
for _, name in ipairs(COUNTS) do
    KEY[name] = '"' .. name .. '"'
end

-- Lua's %s: the bytes a pattern's whitespace class takes (JSON's are the first four)
local SPACE = { [32] = true, [9] = true, [10] = true, [13] = true, [11] = true, [12] = true }
local ZERO, NINE = 48, 57
local MAX_DIGITS = 15   -- any 15-digit integer is exact in a double
local COLON, OPEN, COMMA = 58, 123, 44

-- The first index at or after `i` of `s` that is not whitespace, and its byte.
local function skip_space(s, i)
    local b = str_byte(s, i)
    while b and SPACE[b] do
        i = i + 1
        b = str_byte(s, i)
    end
    return i, b
end

-- The value of member `name` of the flat object text `seg`: a number, false when
-- absent, nil when it is not a plain integer, is there twice, or the name first
-- appears as a string value (all: the caller decodes). Plain finds and byte reads
-- (LuaJIT compiles them; a pattern find runs Lua's matcher, ~2,000 instructions
-- each, measured with bench/instructions.py --luajit).
local function count(seg, name)
    local key = KEY[name]
    local _, e = find(seg, key, 1)
    if not e then
        return false
    end
    local i, b = skip_space(seg, e + 1)
    if b ~= COLON then
        return nil
    end
    local first = skip_space(seg, i + 1)
    local j = first
    local value = 0   -- read as the digits go by: no substring, no tonumber()
    b = str_byte(seg, j)
    while b and b >= ZERO and b <= NINE do
        value = value * 10 + (b - ZERO)
        j = j + 1
        b = str_byte(seg, j)
    end
    -- the value runs to a comma, whitespace or the end: only digits, at least one
    if j == first or (b and b ~= COMMA and not SPACE[b]) then
        return nil      -- float, exponent, null, negative, string
    end
    if j - first > 1 and str_byte(seg, first) == ZERO then
        return nil      -- leading zero
    end
    if j - first > MAX_DIGITS then
        return nil      -- past what a double holds exactly when read digit by digit
    end
    if find(seg, key, j - 1) then
        return nil      -- there twice
    end
    return value
end

-- prompt_tokens, completion_tokens and total_tokens of the `"usage":{...}` object
-- whose `"usage"` key starts at `at`, read without decoding the document, when the
-- object is flat (no nested object or array, no escapes, no "}" inside a string) and
-- each of them is absent or a plain non-negative integer. Returns a table with
-- those present, when total_tokens or both others are; else nil (the caller
-- decodes). For a valid JSON document whose first "usage" key is its top-level
-- one (OpenAI, vLLM: it comes last), the counts equal cjson's.
function _M.usage(body, at)
    if str_sub(body, at, at + 6) ~= '"usage"' then
        return nil
    end
    local i, b = skip_space(body, at + 7)
    if b ~= COLON then
        return nil
    end
    i, b = skip_space(body, i + 1)
    if b ~= OPEN then
        return nil
    end
    local close = str_find(body, "}", i + 1, true)
    if not close then
        return nil
    end
    local seg = str_sub(body, i + 1, close - 1)
    local quotes = flat_quotes(seg)
    if not quotes then
        return nil      -- a nested object or array, or an escape: decode
    end
    if quotes % 2 == 1 then
        return nil      -- the "}" was inside a string: decode
    end
    local p = count(seg, "prompt_tokens")
    local c = p ~= nil and count(seg, "completion_tokens")
    local t = c ~= nil and count(seg, "total_tokens")
    if p == nil or c == nil or t == nil then
        return nil
    end
    if not t and not (p and c) then
        return nil
    end
    return { prompt_tokens = p or nil, completion_tokens = c or nil,
             total_tokens = t or nil }
end

return _M
