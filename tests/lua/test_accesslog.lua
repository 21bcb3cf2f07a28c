-- The access-log line (sluice/accesslog.lua): nginx's escape=json, byte for byte, and
-- the fields of the line in their order.
local accesslog = require("sluice.accesslog")
local cjson = require("cjson.safe")

local T = {}

-- What nginx 1.22's `log_format ... escape=json` wrote for these bytes (checked
-- against a real nginx logging a Lua-set variable holding all 256 byte values).
function T.escapes_like_nginx()
    local esc = accesslog.escape
    assert(esc("\0") == "\\u0000")
    assert(esc("\1\31") == "\\u0001\\u001F")
    assert(esc("\11") == "\\u000B", "upper-case hex")
    assert(esc("\b\t\n\f\r") == "\\b\\t\\n\\f\\r")
    assert(esc('a"b\\c') == 'a\\"b\\\\c')
    assert(esc("\127") == "\127", "DEL is not escaped")
    assert(esc("caf\195\169 /v1/x?y=1") == "caf\195\169 /v1/x?y=1", "UTF-8 and / as they are")
    assert(esc(nil) == "" and esc(12) == "12")
end

function T.all_bytes_round_trip()
    local t = {}
    for b = 0, 255 do
        t[#t + 1] = string.char(b)
    end
    local raw = table.concat(t)
    local doc = cjson.decode('"' .. accesslog.escape(raw) .. '"')
    -- cjson refuses invalid UTF-8 only in strict builds; this one keeps bytes
    assert(doc == raw, "decoding the escaped bytes gives them back")
end

function T.msec_three_decimals()
    assert(accesslog.msec(1764435000.123) == "1764435000.123")
    assert(accesslog.msec(1764435000) == "1764435000.000")
    assert(accesslog.msec(1764435000.0996) == "1764435000.100")
end

-- A context as sluice.context makes it (its groups), with `fields` set and
-- `in_groups` (group name -> fields) in its groups.
local function context(fields, in_groups)
    local ctx = { req = {}, caller = {}, target = {}, body = {}, backend = {}, cache = {},
                  fallback = {} }
    for k, v in pairs(fields) do ctx[k] = v end
    for name, group in pairs(in_groups or {}) do
        for k, v in pairs(group) do ctx[name][k] = v end
    end
    return ctx
end

-- Numbers read as tostring() writes them, whether whole and small (made once per
-- worker and reused) or not: the second line of the same numbers reads the same.
function T.numbers_as_tostring()
    for _ = 1, 2 do
        local line = accesslog.line(context({ usage = { prompt = 0 } },
                                            { backend = { queue_ms = 2.5 } }),
                                    1764435000, "POST", "/p", 503, nil, nil, nil, "m", "", 70000, 65535)
        local doc = assert(cjson.decode(line))
        assert(doc.status == "503" and doc.latency_ms == "70000" and doc.upstream_ms == "65535")
        assert(doc.queue_ms == "2.5" and doc.prompt_tokens == "0" and doc.completion_tokens == "")
        assert(doc.time == "1764435000.000" and doc.bytes_sent == "")
    end
end

-- A line whose optional fields are absent reads as one whose fields are set empty
-- (absent runs are written as one piece each).
function T.absent_fields_read_as_empty_ones()
    local empty = context({ request_id = "r", usage = { prompt = "", completion = "" },
                            error_type = "", upstream_error = "",
                            trace = { id = "t", span = "s" } },
                          { cache = { logged = "" }, body = { excerpt = "" },
                            fallback = { taken = "" }, backend = { queue_ms = "" } })
    local absent = context({ request_id = "r", trace = { id = "t", span = "s" } })
    local args = { 1764435000.25, "POST", "/v1/x", 200, "10", "c", "p", "m", "b", 3, 2 }
    assert(accesslog.line(absent, unpack(args)) == accesslog.line(empty, unpack(args)))
    -- each line's key, and where the context keeps it
    local IN = { prompt_tokens = { "usage", "prompt" }, cache = { "cache", "logged" },
                 excerpt = { "body", "excerpt" }, queue_ms = { "backend", "queue_ms" } }
    for k, at in pairs(IN) do
        local one = context({ request_id = "r", trace = { id = "t", span = "s" }, usage = {} })
        one[at[1]][at[2]] = 7
        local doc = assert(cjson.decode(accesslog.line(one, unpack(args))))
        assert(doc[k] == "7", k)
    end
end

local KEYS = { "time", "request_id", "consumer", "plan", "model", "route", "backend",
               "method", "path", "status", "latency_ms", "upstream_ms", "prompt_tokens",
               "completion_tokens", "cache", "error_type", "bytes_sent", "excerpt",
               "fallback", "queue_ms", "upstream_error", "trace_id", "span_id",
               "parent_span_id" }

function T.line_fields_in_order()
    local ctx = context({ request_id = "r1", usage = { prompt = 5, completion = 2 },
                          error_type = nil, trace = { id = "t", span = "s" } },
                        { target = { route = "rt" }, cache = { logged = "MISS" },
                          body = { excerpt = 'say "hi"\n' } })
    local line = accesslog.line(ctx, 1764435000.5, "POST", "/v1/chat/completions", 200,
                                "530", "alice", "gold", "m", "b1", 12, 3)
    local doc = assert(cjson.decode(line))
    local pos = 0
    for _, k in ipairs(KEYS) do
        local at = line:find('"' .. k .. '":', 1, true)
        assert(at and at > pos, "key " .. k .. " in order")
        pos = at
        assert(type(doc[k]) == "string", k .. " is a string")
    end
    assert(doc.time == "1764435000.500" and doc.status == "200" and doc.latency_ms == "12")
    assert(doc.upstream_ms == "3" and doc.prompt_tokens == "5" and doc.cache == "MISS")
    assert(doc.excerpt == 'say "hi"\n' and doc.error_type == "" and doc.parent_span_id == "")
    assert(doc.consumer == "alice" and doc.plan == "gold" and doc.bytes_sent == "530")
    assert(doc.route == "rt", doc.route)
end

return T
