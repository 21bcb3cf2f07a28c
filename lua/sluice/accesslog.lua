-- The access-log line of a public request, made whole here and written by nginx's
-- buffered access_log (log_format sluice_json '$sl_line' in
-- nginx/nginx.conf.tmpl, escape=none): one variable set per request instead of ten looked
-- up by name, and no per-field formatting in nginx. The bytes are those nginx's
-- `escape=json` made from the same fields before (tests/lua/test_accesslog.lua).
-- Pure: no ngx.*, so it runs under plain luajit.
local buffer = require("string.buffer")
local count = require("sluice.decimal").of   -- statuses, milliseconds, token counts

local str_find = string.find
local str_gsub = string.gsub
local str_format = string.format
local str_char = string.char
local tostring = tostring
local type = type
local floor = math.floor

local _M = {}

-- nginx's ngx_escape_json: `"` and `\` get a backslash, control bytes below 0x20
-- their short form or \u00XX; everything else (UTF-8 and 0x7f too) stays as is.
local SPECIAL = "[%z\1-\31\"\\]"
local ESCAPES = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r",
                  ["\t"] = "\\t", ["\b"] = "\\b", ["\f"] = "\\f" }
for b = 0, 31 do
    local c = str_char(b)
    ESCAPES[c] = ESCAPES[c] or str_format("\\u%04X", b)
end

-- Escaped forms of the short values that repeat (names, paths), so that a line costs
-- table lookups: string.find with a pattern is not compiled by LuaJIT, and calling
-- it for every field made the line cost more than the nginx variables it replaces.
local KNOWN_MAX = 2000      -- entries before the cache starts over
local KNOWN_LEN = 96        -- longer values (excerpts, error bodies) are not kept
local known, known_n = {}, 0

-- `v` as the inside of a JSON string ("" for nil).
local function esc(v)
    if v == nil then
        return ""
    end
    local e = known[v]
    if e then
        return e
    end
    if type(v) ~= "string" then
        return tostring(v)
    end
    e = v
    if str_find(v, SPECIAL) then
        e = str_gsub(v, SPECIAL, ESCAPES)
    end
    if #v <= KNOWN_LEN then
        if known_n >= KNOWN_MAX then
            known, known_n = {}, 0
        end
        known[v] = e
        known_n = known_n + 1
    end
    return e
end
_M.escape = esc

-- nginx's $msec: seconds with three decimals, from `now` (ngx.now()), into `buf`
-- (formatted there: no Lua string made per line).
local function put_msec(buf, now)
    local ms = floor(now * 1000 + 0.5)
    local s = floor(ms / 1000)
    return buf:putf("%d.%03d", s, ms - s * 1000)
end

-- The same as a string (the unit tests).
function _M.msec(now)
    return put_msec(buffer.new(), now):tostring()
end

-- `v`, a number or a string of characters JSON leaves as they are ("" for nil): ids
-- this gateway made or checked (request id, trace and span ids), counts, types.
local function plain(v)
    if v == nil then
        return ""
    end
    return v
end

-- The line (no newline: nginx adds it), put into string.buffer `buf`, from the
-- request's context (sluice/context.lua: the fields it owns for the log) and what the
-- log phase read or worked out. Absent values are written empty: every field of the
-- line is a JSON string. Only what a caller, a backend or the snapshot's names bring
-- goes through esc(). A buffer, not a string: the log phase hands its bytes to nginx
-- (sluice.observe) without making a Lua string of the line. Made as a string, every
-- line was interned, and lines differ only in bytes LuaJIT's hash of a long string
-- does not sample: they queued in one bucket of the string table, and each new one
-- was compared with those not yet collected (~5,000 instructions a request, more as
-- the collector fell behind).
-- Two runs of fields most lines leave empty, each written as one piece when all of
-- it is (a piece put is a call and a copy, ~30 instructions: ~16 fewer per line).
local NO_USAGE = '","prompt_tokens":"","completion_tokens":"","cache":"","error_type":"'
local NOTHING = {}   -- no ctx.trace or ctx.usage: a request refused before access
local NO_EXTRAS = '","excerpt":"","fallback":"","queue_ms":"","upstream_error":"'

function _M.put(buf, ctx, now, method, path, status, bytes_sent, consumer, plan, model,
                backend, latency_ms, upstream_ms)
    buf:put('{"time":"')
    put_msec(buf, now)
    buf:put('","request_id":"', plain(ctx.request_id),
            '","consumer":"', esc(consumer), '","plan":"', esc(plan),
            '","model":"', esc(model), '","route":"', esc(ctx.target.route),
            '","backend":"', esc(backend), '","method":"', method,
            '","path":"', esc(path), '","status":"', count(status),
            '","latency_ms":"', count(latency_ms), '","upstream_ms":"', count(upstream_ms))
    local u = ctx.usage or NOTHING
    local p, c, cache, err = u.prompt, u.completion, ctx.cache.logged, ctx.error_type
    if p == nil and c == nil and cache == nil and err == nil then
        buf:put(NO_USAGE)
    else
        buf:put('","prompt_tokens":"', count(p), '","completion_tokens":"', count(c),
                '","cache":"', plain(cache), '","error_type":"', plain(err))
    end
    buf:put('","bytes_sent":"', plain(bytes_sent))
    local excerpt, fallback, queue_ms, up_err = ctx.body.excerpt, ctx.fallback.taken,
                                                ctx.backend.queue_ms, ctx.upstream_error
    if excerpt == nil and fallback == nil and queue_ms == nil and up_err == nil then
        buf:put(NO_EXTRAS)
    else
        buf:put('","excerpt":"', esc(excerpt), '","fallback":"', esc(fallback),
                '","queue_ms":"', count(queue_ms), '","upstream_error":"', esc(up_err))
    end
    local bill = u.media   -- audio and image work only (sluice.media_usage)
    if bill then
        buf:put('","audio_seconds":"', count(bill.audio), '","input_chars":"',
                count(bill.chars), '","images":"', count(bill.images))
    end
    local phi = ctx.body.phi   -- a model with a phi_policy: hits by class, never values
    if phi and phi.summary then
        buf:put('","phi":"', esc(phi.summary))
    end
    local t = ctx.trace or NOTHING
    buf:put('","trace_id":"', plain(t.id), '","span_id":"', plain(t.span),
            '","parent_span_id":"', plain(t.parent), '"}')
    return buf
end

-- The same line as a string (the unit tests, and anything not on the hot path).
function _M.line(...)
    return _M.put(buffer.new(), ...):tostring()
end

return _M
