-- Runs the data plane's Lua unit tests that need nginx (ngx.*, lua-resty-core, shared
-- dicts, cosockets) inside a real one: tests/lua/nginx/nginx.conf.tmpl, started by
-- tests/unit/test_lua_nginx_units.py. Each tests/lua/nginx/test_*.lua returns a table
-- of name -> function, as tests/lua/*.lua do; a test runs in the content phase of
-- GET /run?file=<file> (it may yield: cosockets, ngx.sleep, light threads) and fails
-- on an error. The answer: "ok <name>" or "FAIL <name>: <error>" per test, then
-- "<passed> passed, <failed> failed".
local cjson = require("cjson.safe")
local headers = require("sluice.headers")
local balancer = require("sluice.balancer")

local ngx = ngx
local pairs = pairs
local pcall = pcall
local sort = table.sort
local concat = table.concat
local tostring = tostring
local type = type

local _M = { ports = {}, pools = {} }

-- init_by_lua: the ports of the backends and what sluice.phases.init would check
-- (sluice.ffi.init; `extra_symbols` lets a test ask for a symbol that is not there).
function _M.init(opts)
    _M.ports = opts.ports or {}
    require("sluice.ffi").init(opts.extra_symbols)
end

function _M.run()
    local file = ngx.var.arg_file
    if type(file) ~= "string" or not file:find("^test_[a-z_]+$") then
        ngx.status = 400
        return ngx.say("file=test_<name> is required")
    end
    local ok, tests = pcall(require, file)
    if not ok then
        ngx.status = 500
        return ngx.say("cannot load ", file, ": ", tostring(tests))
    end
    local names = {}
    for name in pairs(tests) do
        names[#names + 1] = name
    end
    sort(names)
    local passed, failed = 0, 0
    for _, name in ipairs(names) do
        local tok, err = pcall(tests[name])
        if tok then
            passed = passed + 1
            ngx.say("ok ", name)
        else
            failed = failed + 1
            ngx.say("FAIL ", name, ": ", tostring(err))
        end
    end
    ngx.say(passed, " passed, ", failed, " failed")
end

-- GET /headers: what sluice.headers.read sets in a context, as JSON.
function _M.echo_headers()
    local req = {}
    headers.read({ req = req })
    ngx.say(cjson.encode({ authorization = req.authorization, rare_headers = req.rare_headers,
                           request_uri = req.request_uri }))
end

-- Sends `raw` (a whole HTTP/1.1 request, "Connection: close") to this nginx and
-- returns the answer's status, headers (lower-case name -> value) and body.
function _M.request(raw)
    local sock = ngx.socket.tcp()
    sock:settimeout(5000)
    assert(sock:connect("127.0.0.1", tonumber(ngx.var.server_port)))
    assert(sock:send(raw))
    local data = assert(sock:receive("*a"))
    sock:close()
    local head, body = data:match("^(.-)\r\n\r\n(.*)$")
    local status = tonumber(head:match("^HTTP/1%.1 (%d+)"))
    local hdrs = {}
    for name, value in head:gmatch("\r\n([^:\r\n]+): ([^\r\n]*)") do
        hdrs[name:lower()] = value
    end
    if hdrs["transfer-encoding"] == "chunked" then
        local parts, pos = {}, 1
        while true do
            local size, start = body:match("^(%x+)\r\n()", pos)
            size = tonumber(size, 16)
            if not size or size == 0 then break end
            parts[#parts + 1] = body:sub(start, start + size - 1)
            pos = start + size + 2
        end
        body = concat(parts)
    end
    return status, hdrs, body
end

-- /proxy's access phase: balancer.choose from the pool the test registered under
-- ?pool=<name> (it keeps its round-robin state between requests, as a worker does).
function _M.choose()
    local pool = _M.pools[ngx.var.arg_pool]
    local ctx = ngx.ctx
    ctx.target, ctx.backend = {}, {}   -- the groups balancer.choose writes and reads
    if not pool or not balancer.choose(ctx, pool, pool.cfg) then
        return ngx.exit(503)
    end
end

function _M.balance()
    balancer.balance(ngx.ctx, { timeout = 2 })
end

-- X-Tried: the ids of the backends tried, in order ("1" or "1,2").
function _M.tried_header()
    local held = ngx.ctx.backend   -- nil: refused before balancer.choose
    local ids = held and held.tried_ids
    if ids then
        ngx.header["X-Tried"] = type(ids) == "table" and concat(ids, ",") or ids
    end
end

return _M
