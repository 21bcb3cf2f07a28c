-- Byte scans (sluice/bytes.lua): which request URIs location / proxies as they came
-- (exactly those whose path nginx's $uri leaves byte for byte), and whitespace in a
-- key, against Lua's own %s.
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

return T
