-- Byte scans (sluice/bytes.lua): which request URIs location / proxies as they came
-- (exactly those whose path nginx's $uri leaves byte for byte), whitespace in a key
-- against Lua's own %s, all-ASCII bodies, and nginx's joined variables split.
local uri = require("sluice.bytes")

local T = {}

function T.plain_paths_are_their_own_uri()
    assert(uri.plain_path("/v1/chat/completions") == "/v1/chat/completions")
    assert(uri.plain_path("/v1/chat/completions?a=1&b=%20") == "/v1/chat/completions")
    assert(uri.plain_path("/v2/models/m-1_x:y/infer") == "/v2/models/m-1_x:y/infer")
    assert(uri.plain_path("/") == "/")
    assert(uri.plain_path("/a/b?x=//%./#") == "/a/b")   -- the query string is not the path
    assert(uri.plain_path("/a.b/c-d") == "/a.b/c-d")
    assert(uri.plain_path("/v1/models/m/") == "/v1/models/m/")   -- nginx keeps it too
end

function T.paths_nginx_normalises_are_not()
    for _, raw in ipairs({ "/v1/chat%2Fcompletions", "/v1//chat/completions",
                           "/v1/./chat/completions", "/v1/x/../chat/completions",
                           "/v1/chat/completions#frag", "/v1/chat completions",
                           "/v2/models/a%20b/infer?x=1", "/v1/.hidden",
                           "//", "/a/./" }) do
        assert(uri.plain_path(raw) == nil, raw)
    end
end

function T.has_space_is_luas_percent_s()
    for b = 0, 255 do
        local c = string.char(b)
        local want = c:find("%s") ~= nil
        for _, s in ipairs({ c, "sk-" .. c, c .. "abcdefgh12345678", "sk-abcdefgh" .. c .. "x" }) do
            assert(uri.has_space(s) == want, b)
        end
    end
    assert(not uri.has_space(""))
    assert(not uri.has_space("sk-bench-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"))
end

-- ascii() is exact at every length and position: 8-byte words and the tail.
function T.ascii_finds_any_high_byte()
    for n = 0, 40 do
        local s = string.rep("a", n)
        assert(uri.ascii(s), n)
        for i = 1, n do
            for _, c in ipairs({ "\128", "\195", "\255" }) do
                local t = s:sub(1, i - 1) .. c .. s:sub(i + 1)
                assert(not uri.ascii(t), n .. ":" .. i)
            end
        end
    end
    assert(uri.ascii("\0\1\127 {}\n"))
    assert(not uri.ascii('{"text": "caf\195\169"}'))
end

-- fields() splits nginx's joined variables: empty fields are nil.
function T.fields_split_on_newlines()
    local a, b, c = uri.fields("1\n/v1/x?a=1\nBearer k")
    assert(a == "1" and b == "/v1/x?a=1" and c == "Bearer k")
    a, b, c = uri.fields("\n/v1/x\n")
    assert(a == nil and b == "/v1/x" and c == nil)
    a, b, c = uri.fields("\n\n1234")
    assert(a == nil and b == nil and c == "1234")
    a, b = uri.fields("12\ntext/event-stream")
    assert(a == "12" and b == "text/event-stream")
    a, b = uri.fields("\napplication/json")
    assert(a == nil and b == "application/json")
    a, b = uri.fields("\n")
    assert(a == nil and b == nil)
end

-- bytes.find is string.find(s, needle, init, true), on the texts and needles of the
-- usage scan and on every start position, ends and misses included.
function T.find_is_plain_string_find()
    local texts = { "", "a", '"usage"', '{"usage":{"prompt_tokens":5}}', "aaaa", "abcabcabd",
                    '{"id":"x","usage":{"total_tokens":7},"usage":1}', "\0\n\"" }
    local needles = { '"usage"', '"', "a", "aa", "abd", "}", '"total_tokens"', "zz", "\"" }
    for _, s in ipairs(texts) do
        for _, needle in ipairs(needles) do
            for init = 1, #s + 2 do
                local i, j = uri.find(s, needle, init)
                local ei, ej = string.find(s, needle, init, true)
                assert(i == ei and j == ej, ("%q in %q from %d: %s,%s, not %s,%s"):format(
                    needle, s, init, tostring(i), tostring(j), tostring(ei), tostring(ej)))
            end
        end
        assert(uri.find(s, "a") == string.find(s, "a", 1, true))
    end
end

function T.flat_quotes_counts_quotes_of_flat_text()
    assert(uri.flat_quotes("") == 0)
    assert(uri.flat_quotes('"prompt_tokens":5,"total_tokens":7') == 4)
    assert(uri.flat_quotes('"a":"b') == 3)
    for _, s in ipairs({ '"a":{', '"a":[1]', '"a\\"b"', "{", "[", "\\" }) do
        assert(uri.flat_quotes(s) == nil, s)
    end
end

return T
