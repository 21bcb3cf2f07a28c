-- sluice.headers.read: one walk over the request's headers finds Authorization and
-- the rare ones (X-Request-Id, traceparent, Prefer, X-Sluice-Worker-Token), through
-- real requests to GET /headers (tests/lua/nginx/runner.lua).
local cjson = require("cjson.safe")
local runner = require("runner")

local T = {}

-- What /headers saw of a request carrying `lines` (header lines, in order).
local function seen(lines, uri)
    local raw = "GET " .. (uri or "/headers") .. " HTTP/1.1\r\nHost: test\r\n"
                .. table.concat(lines, "\r\n") .. (#lines > 0 and "\r\n" or "")
                .. "Connection: close\r\n\r\n"
    local status, _, body = runner.request(raw)
    assert(status == 200, "status " .. tostring(status) .. ": " .. tostring(body))
    return assert(cjson.decode(body))
end

function T.authorization_is_read_whatever_its_case()
    local got = seen({ "Authorization: Bearer sk-one" })
    assert(got.authorization == "Bearer sk-one", got.authorization)
    assert(got.rare_headers == false)
    got = seen({ "aUtHoRiZaTiOn: Basic Zm9vOmJhcg==" })
    assert(got.authorization == "Basic Zm9vOmJhcg==", got.authorization)
end

function T.no_or_empty_authorization_is_none()
    local got = seen({})
    assert(got.authorization == nil and got.rare_headers == false, cjson.encode(got))
    got = seen({ "Authorization:" })
    assert(got.authorization == nil, got.authorization)
end

function T.each_rare_header_is_noticed()
    for _, line in ipairs({ "X-Request-Id: abc-123",
                            "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                            "Prefer: respond-async", "X-Sluice-Worker-Token: t0k3n" }) do
        local got = seen({ "Accept: */*", line })
        assert(got.rare_headers == true, line)
    end
end

function T.look_alikes_are_not_rare()
    -- same lengths as the rare names, other bytes; an empty rare header counts as absent
    local got = seen({ "X-Request-Ix: 1", "traceparenz: 2", "Prefex: 3", "X-Sluice-Worker-Tokex: 4",
                       "X-Request-Id:" })
    assert(got.rare_headers == false, cjson.encode(got))
end

function T.many_headers_are_all_walked()
    local lines = {}
    for i = 1, 90 do
        lines[i] = "X-Filler-" .. i .. ": value " .. i
    end
    lines[#lines + 1] = "Authorization: Bearer last-of-many"
    lines[#lines + 1] = "Prefer: wait=5"
    local got = seen(lines)
    assert(got.authorization == "Bearer last-of-many", got.authorization)
    assert(got.rare_headers == true)
end

function T.duplicate_headers()
    -- a repeated rare header still counts; nginx itself refuses a second
    -- Authorization (400), so the walk sees at most one
    local got = seen({ "X-Request-Id: one", "X-Request-Id: two", "Authorization: Bearer a" })
    assert(got.rare_headers == true and got.authorization == "Bearer a", cjson.encode(got))
    local status = runner.request("GET /headers HTTP/1.1\r\nHost: t\r\nAuthorization: a\r\n"
                                  .. "Authorization: b\r\nConnection: close\r\n\r\n")
    assert(status == 400, "two Authorization headers: " .. tostring(status))
end

function T.request_uri_is_read_as_sent()
    local got = seen({}, "/headers?a=1&b=%20x")
    assert(got.request_uri == "/headers?a=1&b=%20x", got.request_uri)
end

function T.the_walk_in_this_request()
    -- this request (GET /run) carries no Authorization
    local req = {}
    require("sluice.headers").read({ req = req })
    assert(req.authorization == nil and req.rare_headers == false)
    assert(req.request_uri:find("^/run%?file=test_headers"), req.request_uri)
end

return T
