-- bench/routing.py's in-nginx loop: the routing decision a request makes in the
-- access phase (pool lookup, weighted pick over controller weights x breaker health,
-- the half-open probe check), `iters` times, timed with ngx.now().
-- GET /?model=<name>&iters=<n>  ->  {"iters": n, "us_per_decision": x, "picks": {...}}
-- GET /?route=<name>&iters=<n>&consumers=<c>: instead, the route-version choice
-- (sluice.splits.pick: conditions, then the sticky hash) for c distinct consumers in
-- turn, every other one a vip  ->  {..., "picks": {version: count}}
local cjson = require("cjson.safe")
local config = require("sluice.config")
local target = require("sluice.target")
local balancer = require("sluice.balancer")

local ngx = ngx
local tonumber = tonumber

local ENDPOINT = { name = "chat", protocol = "openai" }

local args = ngx.req.get_uri_args()
local model = args.model
local iters = tonumber(args.iters) or 100000
local snap = config.get()
if not snap then
    ngx.status = 503
    ngx.say('{"error": "no snapshot"}')
    return
end

local route_name = args.route
if route_name then
    local splits = require("sluice.splits")
    local route = snap.routes[route_name]
    local n = tonumber(args.consumers) or 10000
    local consumers, attrs = {}, {}
    for i = 1, n do
        consumers[i] = { key_id = tostring(i) }
        attrs[i] = { user_type = i % 2 == 0 and "vip" or "basic" }
    end
    local picks = {}
    ngx.update_time()
    local t0 = ngx.now()
    for i = 1, iters do
        local c = i % n + 1
        local v = splits.pick(route, attrs[c], consumers[c])
        picks[v] = (picks[v] or 0) + 1
    end
    ngx.update_time()
    local dt = ngx.now() - t0
    ngx.say(cjson.encode({ iters = iters, seconds = dt, us_per_decision = dt / iters * 1e6,
                           picks = picks }))
    return
end

local ctx = { target = {}, backend = {} }   -- the groups balancer.choose uses
local picks = {}
-- warm up (JIT, worker caches)
for _ = 1, 1000 do
    local pool = select(5, target.pool(snap, ENDPOINT, model))
    balancer.choose(ctx, pool, snap.breaker)
end
ngx.update_time()
local t0 = ngx.now()
for _ = 1, iters do
    local s = config.get()                       -- the per-request snapshot check
    local pool = select(5, target.pool(s, ENDPOINT, model))
    local b = balancer.choose(ctx, pool, s.breaker)
    if b then
        local k = b.id_s
        picks[k] = (picks[k] or 0) + 1
    end
end
ngx.update_time()
local dt = ngx.now() - t0
ngx.say(cjson.encode({ iters = iters, seconds = dt, us_per_decision = dt / iters * 1e6,
                       picks = picks }))
