-- Bounded scans of JSON text that avoid decoding a whole document on the hot path.
-- Each either returns what a full decode would give, or nil: the caller then decodes
-- (a scan never guesses). Pure Lua (no ngx): unit-tested with plain luajit against
-- cjson's decode of the same texts (tests/lua/test_scan.lua).
local str_find = string.find
local str_sub = string.sub
local str_gsub = string.gsub
local str_byte = string.byte
local ipairs = ipairs
local tonumber = tonumber

local _M = {}

local COUNTS = { "prompt_tokens", "completion_tokens", "total_tokens" }
local KEY = {}      -- name -> '"name"', the member's key as it appears
for _, name in ipairs(COUNTS) do
    KEY[name] = '"' .. name .. '"'
end

-- The value of member `name` of the flat object text `seg`: a number, false when
-- absent, nil when it is not a plain integer, is there twice, or the name first
-- appears as a string value (all: the caller decodes).
local function count(seg, name)
    local key = KEY[name]
    local _, e = str_find(seg, key, 1, true)
    if not e then
        return false
    end
    local _, e2, v = str_find(seg, "^%s*:%s*([^,%s]*)", e + 1)
    if not e2 or str_find(seg, key, e2, true) then
        return nil
    end
    if not str_find(v, "^%d+$") or (#v > 1 and str_byte(v, 1) == 48) then
        return nil      -- float, exponent, null, negative, leading zero, string
    end
    return tonumber(v)
end

-- prompt_tokens, completion_tokens and total_tokens of the `"usage":{...}` object
-- whose `"usage"` key starts at `at`, read without decoding the document, when the
-- object is flat (no nested object or array, no escapes, no "}" inside a string) and
-- each of them is absent or a plain non-negative integer. Returns a table with
-- those present, when total_tokens or both others are; else nil (the caller
-- decodes). For a valid JSON document whose first "usage" key is its top-level
-- one (OpenAI, vLLM: it comes last), the counts equal cjson's.
function _M.usage(body, at)
    local _, open_end = str_find(body, '^"usage"%s*:%s*{', at)
    local close = open_end and str_find(body, "}", open_end + 1, true)
    if not close then
        return nil
    end
    local seg = str_sub(body, open_end + 1, close - 1)
    if str_find(seg, "[{%[\\]") then
        return nil      -- a nested object or array, or an escape: decode
    end
    local _, quotes = str_gsub(seg, '"', "")
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
