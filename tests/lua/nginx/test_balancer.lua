-- sluice.balancer: smooth weighted choice over effective weights (the controller's
-- pushed weight, else the static one, times health), open circuits skipped, a
-- half-open one probed, and bounded retries to interchangeable backends through a
-- real proxy_pass (GET /proxy, tests/lua/nginx/nginx.conf.tmpl).
local cjson = require("cjson.safe")
local balancer = require("sluice.balancer")
local breaker = require("sluice.breaker")
local weights = require("sluice.weights")
local health = require("sluice.health")
local metrics = require("sluice.metrics")
local stats = require("sluice.stats")
local runner = require("runner")

local T = {}

local seq = 0
-- A pool as config.lua compiles it; `specs`: { {weight=, port=, base_path=}... }.
-- Ids are unique to the pool, so circuits and stats of other tests do not touch it.
local function pool_of(specs, cfg)
    seq = seq + 1
    local pool = { backends = {}, weights = {}, current = {}, n = 0, total = 0, eff = {},
                   open = {}, usable = 0, qkey = "balancer-test/" .. seq, w_gen = -1,
                   b_gen = -1, next_refresh = 0, cfg = cfg or breaker.settings(nil) }
    for i, s in ipairs(specs) do
        local id = ngx.worker.pid() * 1000 + seq * 10 + i
        pool.backends[i] = { id = id, id_s = tostring(id), name = s.name or ("b" .. i),
                             host = "127.0.0.1", port = s.port or 1,
                             base_path = s.base_path or "", auth_header = "", tls_id = "" }
        pool.weights[i], pool.current[i], pool.eff[i], pool.open[i] = s.weight, 0, s.weight, false
        pool.n, pool.total = i, pool.total + s.weight
    end
    return pool
end

-- Backend index -> times chosen in `n` choices.
local function shares(pool, n)
    local count = {}
    for i = 1, pool.n do count[i] = 0 end
    for _ = 1, n do
        local ctx = { target = {}, backend = {} }
        local b = balancer.choose(ctx, pool, pool.cfg)
        assert(b, "no backend chosen")
        local held = ctx.backend
        assert(held.pool == pool and pool.backends[held.index] == b)
        count[held.index] = count[held.index] + 1
    end
    return count
end

local version = math.floor(ngx.now() * 1000)
local function push_weights(tbl)
    version = version + 1
    local v, _, err = weights.push(cjson.encode({ version = version, weights = tbl }))
    assert(v == version, err)
end

function T.static_weights_share_the_choices_exactly()
    local pool = pool_of({ { weight = 3 }, { weight = 1 }, { weight = 0 } })
    local c = shares(pool, 40)
    assert(c[1] == 30 and c[2] == 10 and c[3] == 0, table.concat(c, " "))
end

function T.pushed_weights_win_over_static_ones()
    local pool = pool_of({ { weight = 3 }, { weight = 1 } })
    local b1, b2 = pool.backends[1].id_s, pool.backends[2].id_s
    push_weights({ [b1] = 100, [b2] = 300 })
    local c = shares(pool, 40)
    assert(c[1] == 10 and c[2] == 30, table.concat(c, " "))
    -- a pushed 0 drains a backend
    push_weights({ [b1] = 0, [b2] = 300 })
    c = shares(pool, 10)
    assert(c[1] == 0 and c[2] == 10, table.concat(c, " "))
    push_weights({})
end

function T.open_circuits_are_skipped()
    local cfg = breaker.settings({ min_requests = 4, cooldown_s = 30, window_s = 60 })
    local pool = pool_of({ { weight = 1 }, { weight = 1 }, { weight = 1 } }, cfg)
    local id2 = pool.backends[2].id_s
    for _ = 1, 4 do breaker.record(id2, false, cfg) end
    assert(breaker.state(id2) == "open", breaker.state(id2))
    local c = shares(pool, 30)
    assert(c[2] == 0 and c[1] == 15 and c[3] == 15, table.concat(c, " "))
    assert(pool.usable == 2, pool.usable)
end

function T.all_open_gives_no_backend_and_the_wait()
    local cfg = breaker.settings({ min_requests = 2, cooldown_s = 20 })
    local pool = pool_of({ { weight = 1 }, { weight = 5 } }, cfg)
    for i = 1, 2 do
        for _ = 1, 2 do breaker.record(pool.backends[i].id_s, false, cfg) end
    end
    local b, wait = balancer.choose({ target = {}, backend = {} }, pool, cfg)
    assert(b == nil and wait and wait >= 19 and wait <= 20, tostring(wait))
    -- drained (weight 0) rather than open: no wait to give
    local drained = pool_of({ { weight = 0 } })
    b, wait = balancer.choose({ target = {}, backend = {} }, drained, drained.cfg)
    assert(b == nil and wait == nil)
end

function T.a_half_open_circuit_gets_only_its_probes()
    local cfg = breaker.settings({ min_requests = 2, cooldown_s = 30, probes = 1 })
    local pool = pool_of({ { weight = 10 }, { weight = 1 } }, cfg)
    local id1 = pool.backends[1].id_s
    for _ = 1, 2 do breaker.record(id1, false, cfg) end
    -- the cooldown is over: half-open
    ngx.shared.sluice_breaker:set("open:" .. id1, ngx.now() - 1)
    ngx.shared.sluice_breaker:incr("gen", 1, 0)
    assert(breaker.state(id1) == "half_open")
    local c = shares(pool, 11)
    assert(c[1] == 1 and c[2] == 10, "half-open backend chosen " .. c[1] .. " times")
    -- its probe succeeds: closed, full weight again
    breaker.record(id1, true, cfg)
    assert(breaker.state(id1) == "closed")
    c = shares(pool, 11)
    assert(c[1] == 10 and c[2] == 1, table.concat(c, " "))
end

function T.a_loading_backend_gets_no_traffic()
    local pool = pool_of({ { weight = 1 }, { weight = 1 } })
    local id1 = pool.backends[1].id_s
    local v, _, err = health.push(cjson.encode({ version = math.floor(ngx.now() * 1000) + seq,
                                                 backends = { [id1] = { state = "loading" } } }))
    assert(v, err)
    local c = shares(pool, 10)
    assert(c[1] == 0 and c[2] == 10, table.concat(c, " "))
    assert(health.push(cjson.encode({ version = math.floor(ngx.now() * 1000) + seq + 1,
                                      backends = {} })))
    c = shares(pool, 10)
    assert(c[1] == 5 and c[2] == 5, table.concat(c, " "))
end

-- GET /proxy through `pool` (registered under a name): status, X-Tried, body.
local function proxy(pool)
    local name = pool.qkey
    runner.pools[name] = pool
    local status, hdrs, body = runner.request("GET /proxy?pool=" .. name .. " HTTP/1.1\r\n"
                                              .. "Host: t\r\nConnection: close\r\n\r\n")
    runner.pools[name] = nil
    return status, hdrs["x-tried"], body
end

local function ids(pool, ...)
    local out = {}
    for i, k in ipairs({ ... }) do out[i] = pool.backends[k].id_s end
    return table.concat(out, ",")
end

function T.a_connect_failure_is_retried_on_another_backend()
    local p = runner.ports
    local pool = pool_of({ { weight = 10, port = p.dead }, { weight = 1, port = p.a } })
    local status, tried, body = proxy(pool)
    assert(status == 200 and body == "a", tostring(status) .. " " .. tostring(body))
    assert(tried == ids(pool, 1, 2), tostring(tried))
end

function T.a_502_answer_is_retried_on_another_backend()
    local p = runner.ports
    local pool = pool_of({ { weight = 10, port = p.c }, { weight = 1, port = p.b } })
    local status, tried, body = proxy(pool)
    assert(status == 200 and body == "b", tostring(status) .. " " .. tostring(body))
    assert(tried == ids(pool, 1, 2), tostring(tried))
    -- the attempts' outcomes, as the log phase records them
    local before = stats.backend(pool.backends[1].id_s)
    balancer.log({ pool.backends[1].id_s, pool.backends[2].id_s }, "502, 200", "0.001, 0.002",
                 pool.cfg)
    metrics.flush()
    local after = stats.backend(pool.backends[1].id_s)
    assert(after.failures == before.failures + 1, after.failures)
    assert(stats.backend(pool.backends[2].id_s).successes >= 1)
end

function T.retries_are_bounded()
    local p = runner.ports
    local specs = {}
    for i = 1, 5 do specs[i] = { weight = 1, port = p.dead } end
    local pool = pool_of(specs)
    local status, tried = proxy(pool)
    assert(status == 502, tostring(status))
    local n = select(2, tried:gsub(",", "")) + 1
    -- the first attempt and MAX_RETRIES (2) others, of five that would all fail
    assert(balancer.MAX_RETRIES == 2 and n == 3, tried)
end

function T.no_retry_to_a_backend_that_does_not_fit_the_request()
    -- another base_path: nginx's request to the first would be wrong for it
    local p = runner.ports
    local pool = pool_of({ { weight = 10, port = p.dead }, { weight = 1, port = p.a,
                                                             base_path = "/other" } })
    local status, tried = proxy(pool)
    assert(status == 502 and tried == ids(pool, 1), tostring(status) .. " " .. tostring(tried))
end

return T
