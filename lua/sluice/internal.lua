-- The internal listener (docs/contracts.md, "Gateway internal listener"):
--   POST /internal/snapshot   take a snapshot push
--   GET  /internal/snapshot   the version served, when and from where
--   GET  /metrics             Prometheus text format (sluice.metrics)
--   POST /internal/weights    take a weight table push
--   GET  /internal/weights    the weight table in use, its version, age and state
--   GET  /internal/stats      per-backend successes, failures, last latencies, circuit
--   POST /internal/health     take the controller's backend readiness (health.lua)
--   GET  /internal/health     the readiness in use
--   GET  /internal/usage      usage counters per consumer, model and day (sluice.usage)
--   POST /internal/usage      the fleet's usage, added to the quota counters
-- Every call needs `Authorization: Bearer <gateway token>`.
local config = require("sluice.config")
local errors = require("sluice.errors")
local metrics = require("sluice.metrics")
local weights = require("sluice.weights")
local stats = require("sluice.stats")
local breaker = require("sluice.breaker")
local balancer = require("sluice.balancer")
local health = require("sluice.health")
local admission = require("sluice.admission")
local usage = require("sluice.usage")

local ngx = ngx
local ngx_var = ngx.var
local ngx_req = ngx.req
local re_match = ngx.re.match
local io_open = io.open
local type = type
local pairs = pairs
local str_byte = string.byte
local bit_bor = require("bit").bor
local bit_bxor = require("bit").bxor

local _M = {}

local token

metrics.register("sluice_snapshot_version", "gauge",
                 "Version of the snapshot this gateway serves (0: none).")
metrics.register("sluice_snapshot_age_seconds", "gauge",
                 "Seconds since the served snapshot was loaded (push or last-known-good).")

function _M.init(t)
    if type(t) ~= "string" or #t < 16 then
        error("internal token must be a string of at least 16 characters", 2)
    end
    token = t
end

-- Compare without an early exit, so timing does not tell how much matched.
local function same(a, b)
    if #a ~= #b then
        return false
    end
    local diff = 0
    for i = 1, #a do
        diff = bit_bor(diff, bit_bxor(str_byte(a, i), str_byte(b, i)))
    end
    return diff == 0
end

-- Is `given` the gateway token? (Also the credential of a worker running a job on a
-- consumer's behalf: sluice.jobs.)
function _M.is_token(given)
    return token ~= nil and type(given) == "string" and same(given, token)
end

local function check_token()
    local authz = ngx_var.http_authorization
    if not authz then
        return errors.exit(401, "unauthorized", "the gateway token is required")
    end
    local m = re_match(authz, [[^\s*Bearer\s+(\S+)\s*$]], "joi")
    if not m or not same(m[1], token) then
        return errors.exit(403, "forbidden", "wrong gateway token")
    end
end

local function body()
    ngx_req.read_body()
    local data = ngx_req.get_body_data()
    if data then
        return data
    end
    local path = ngx_req.get_body_file()
    if not path then
        return nil
    end
    local f = io_open(path, "rb")
    if not f then
        return nil
    end
    data = f:read("*a")
    f:close()
    return data
end

local function push_snapshot()
    local raw = body()
    if not raw or raw == "" then
        return errors.exit(400, "invalid_request", "a snapshot body is required")
    end
    local version, status, msg = config.push(raw)
    if not version then
        return errors.exit(status, nil, msg)
    end
    return errors.json(200, { version = version })
end

-- The snapshot gauges are set at scrape time; everything else is counted per request.
local function serve_metrics()
    local st = config.status()
    metrics.set("sluice_snapshot_version", st.version)
    balancer.export_metrics(config.get())
    health.export_metrics(config.get())
    admission.export_metrics(config.get())
    if type(st.loaded_at) == "number" then
        metrics.set("sluice_snapshot_age_seconds", ngx.now() - st.loaded_at)
    end
    ngx.status = 200
    ngx.header["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
    ngx.print(metrics.render())
    return ngx.exit(200)
end

local function push_weights()
    local raw = body()
    if not raw or raw == "" then
        return errors.exit(400, "invalid_request", "a weights body is required")
    end
    local version, status, msg = weights.push(raw)
    if not version then
        return errors.exit(status, nil, msg)
    end
    return errors.json(200, { version = version })
end

local function push_health()
    local version, status, msg = health.push(body() or "")
    if not version then
        return errors.exit(status, nil, msg)
    end
    return errors.json(200, { version = version })
end

local function get_stats()
    local snap = config.get()
    local out = stats.all(snap)
    local now = ngx.now()
    for id, s in pairs(out) do
        s.circuit = breaker.state(id, now)
        s.in_flight = admission.in_flight(id)
    end
    return errors.json(200, { backends = out, weights_version = weights.status().version,
                              queues = admission.queues(snap) })
end

local function push_usage()
    local raw = body()
    if not raw or raw == "" then
        return errors.exit(400, "invalid_request", "a usage body is required")
    end
    local version, status, msg = usage.push(raw, config.get())
    if not version then
        return errors.exit(status, nil, msg)
    end
    return errors.json(200, { version = version })
end

local function get_weights()
    return errors.json(200, weights.status())
end

local function get_health()
    return errors.json(200, health.status())
end

local function get_usage()
    return errors.json(200, usage.report(config.get()))
end

local function get_snapshot()
    return errors.json(200, config.status())
end

-- path -> method -> handler; `allow` is the Allow header of a 405 and its message
local ROUTES = {
    ["/metrics"] = { GET = serve_metrics },
    ["/internal/weights"] = { GET = get_weights, POST = push_weights },
    ["/internal/health"] = { GET = get_health, POST = push_health },
    ["/internal/stats"] = { GET = get_stats },
    ["/internal/usage"] = { GET = get_usage, POST = push_usage },
    ["/internal/snapshot"] = { GET = get_snapshot, POST = push_snapshot },
}
for _, methods in pairs(ROUTES) do
    if methods.POST then
        methods.allow, methods.accepts = "GET, POST", " accepts GET and POST"
    else
        methods.allow, methods.accepts = "GET", " accepts GET"
    end
end

function _M.handle()
    check_token()
    local uri = ngx_var.uri
    local methods = ROUTES[uri]
    if not methods then
        return errors.exit(404, "not_found", "no internal endpoint at " .. uri)
    end
    local handler = methods[ngx_req.get_method()]
    if type(handler) ~= "function" then
        ngx.header["Allow"] = methods.allow
        return errors.exit(405, "method_not_allowed", uri .. methods.accepts)
    end
    return handler()
end

return _M
