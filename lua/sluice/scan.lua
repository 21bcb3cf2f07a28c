-- Bounded scans of JSON text that avoid decoding a whole document on the hot path.
-- Each either returns what a full decode would give, or nil: the caller then decodes
-- (a scan never guesses). Pure Lua (no ngx): unit-tested with plain luajit against
-- cjson's decode of the same texts (tests/lua/test_scan.lua).
local str_find = string.find
local str_sub = string.sub
local str_match = string.match
local str_gsub = string.gsub
local str_byte = string.byte
local gmatch = string.gmatch
local tonumber = tonumber

local _M = {}

-- The `"usage":{...}` object whose `"usage"` key starts at `at`, read without
-- decoding the document, when it is flat (no nested object or array, no escapes):
-- returns { <key>_tokens = n, ... } for its *_tokens members when each is a plain
-- non-negative integer and total_tokens, or prompt and completion tokens, are there.
-- Anything else (nested *_details objects, floats, exponents, null, escapes) is nil:
-- the caller decodes. For a valid JSON document whose first "usage" key is the
-- top-level one (OpenAI, vLLM: it comes last), the result equals cjson's.
function _M.usage(body, at)
    local _, open_end = str_find(body, '^"usage"%s*:%s*{', at)
    local close = open_end and str_find(body, "}", open_end + 1, true)
    if not close then
        return nil
    end
    local seg = str_sub(body, open_end + 1, close - 1)
    if str_find(seg, '[^%w%s_":,.+-]') then
        return nil      -- nested {, [, an escape, or anything unusual: decode
    end
    local _, quotes = str_gsub(seg, '"', "")
    if quotes % 2 == 1 then
        return nil      -- the "}" was inside a string: decode
    end
    local usage = {}
    for k, v in gmatch(seg .. ",", '"([^"]*)"%s*:%s*([^,]*),') do
        if str_find(k, "_tokens$") then
            local digits = str_match(v, "^(%d+)%s*$")
            if not digits or (#digits > 1 and str_byte(digits, 1) == 48) then
                return nil      -- not a plain integer (or a leading zero): decode
            end
            usage[k] = tonumber(digits)
        end
    end
    if usage.total_tokens or (usage.prompt_tokens and usage.completion_tokens) then
        return usage
    end
    return nil
end

return _M
