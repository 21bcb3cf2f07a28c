-- The snapshot: validated, kept as raw JSON in the sluice_config shared dict, written
-- to a last-known-good file, and decoded once per worker per change.
--
--   push -> validate -> dict {raw, version, gen, loaded_at, source} -> lkg/snapshot.json
--   request -> get() -> worker-local compiled table, rebuilt only when "gen" moves
local cjson = require("cjson.safe")
local plans = require("sluice.plans")
local realtime_plans = require("sluice.realtime_plans")
local jwt = require("sluice.jwt")
local content = require("sluice.content")
local mappings = require("sluice.mappings")
local breaker = require("sluice.breaker")
local ip_limit = require("sluice.ip_limit")
local splits = require("sluice.splits")
local admission = require("sluice.admission")
local validate = require("sluice.validate")
local upstream_tls = require("sluice.upstream_tls")
local shape = require("sluice.shape")
local same = require("sluice.same").same
local moved = require("sluice.moved")
local media = require("sluice.media")
local phi_scan = require("sluice.phi_scan")

local ngx = ngx
local ngx_log = ngx.log
local ERR = ngx.ERR
local WARN = ngx.WARN
local NOTICE = ngx.NOTICE
local ngx_now = ngx.now
local ngx_sleep = ngx.sleep
local type = type
local pairs = pairs
local ipairs = ipairs
local tostring = tostring
local io_open = io.open
local os_rename = os.rename
local os_remove = os.remove

local json_null = cjson.null
local dict = ngx.shared.sluice_config

local LKG_FILE = "lkg/snapshot.json"
local LOCK_TTL = 10        -- seconds a crashed holder can block pushes
local LOCK_WAIT = 5        -- seconds a push waits for the lock
local DEFAULT_CACHE_TTL = 0      -- a snapshot that does not ask for caching gets none

local _M = {}

-- worker-local compiled snapshot, the decoded one it came from, the dict
-- generation it was built from, and sluice.moved's count when it was last checked
local cached, cached_doc, cached_gen, cached_moved

-- Returns true, or nil and a message naming the first bad field (sluice.validate).
_M.validate = validate.snapshot

-- A backend's credential as $sluice_upstream_auth carries it: an `anthropic`
-- backend's key goes as X-API-Key (nginx.conf.tmpl maps the "x-api-key:" mark),
-- its "Bearer " prefix, if any, left off; every other's is the Authorization header.
local function credential(b)
    local value = b.auth_header
    if not value then
        return ""
    end
    if b.protocol == "anthropic" then
        return "x-api-key:" .. (value:match("^Bearer%s+(.+)$") or value)
    end
    return value
end

-- One model of decoded snapshot `s` -> what the hot path reads. Pools hold only
-- backends with weight > 0 (and, for https, whose trust location is loaded);
-- `current` is the smooth-weighted-round-robin state of this worker.
local function compile_model(s, name, m, maps)
    local pools, order = {}, {}
    for _, b in ipairs(m.backends) do
        -- one pool per protocol; vendor backends pool per mapping
        local key = b.protocol == "vendor" and "vendor:" .. b.mapping or b.protocol
        local pool = pools[key]
        if not pool then
            -- eff/open/usable and the *_gen/next_refresh stamps: balancer.lua's
            -- per-worker view of controller weights and circuits
            pool = { backends = {}, weights = {}, current = {}, n = 0, total = 0,
                     drained = 0, protocol = b.protocol, mapping = maps[b.mapping],
                     eff = {}, open = {}, usable = 0,
                     qkey = name .. "/" .. key,   -- its queue's keys (sluice.queue)
                     w_gen = -1, b_gen = -1, next_refresh = 0 }
            pools[key] = pool
            order[#order + 1] = key
        end
        local tls = upstream_tls.compile(b)
        if tls and not tls.loaded then
            -- its CA location comes with the reload this snapshot causes
            ngx_log(WARN, "backend ", tostring(b.name or b.id), ": TLS trust ", tls.trust,
                    " is not loaded yet; left out until the gateway reloads")
        end
        if b.weight > 0 and (not tls or tls.loaded) then
            local n = pool.n + 1
            pool.n = n
            pool.backends[n] = {
                id = b.id,
                id_s = tostring(b.id),   -- weight table and dict keys
                name = b.name,
                host = b.host,
                port = b.port,
                host_header = b.host_header or (b.host .. ":" .. b.port),
                base_path = b.base_path or "",
                auth_header = credential(b),
                max_in_flight = admission.capacity_of(b),
                tls = tls,                     -- nil for http://
                tls_id = tls and tls.id or "",
            }
            -- a hosted vendor's key header, other headers, paths and query (sluice.shape)
            shape.attach(pool.backends[n], b)
            pool.weights[n] = b.weight
            pool.current[n] = 0
            pool.eff[n] = b.weight
            pool.open[n] = false
            pool.total = pool.total + b.weight
        else
            pool.drained = pool.drained + 1
        end
    end
    table.sort(order)
    local media_tasks, max_request_bytes = media.compile_model(m)
    return { name = name, timeout = m.timeout_ms / 1000, pools = pools,
             cache_ttl = m.cache_ttl_s or DEFAULT_CACHE_TTL,
             cache_shared = m.cache_shared == true,   -- fallback: sluice.fallback
             fallback = s.models[m.fallback_model] and m.fallback_model or nil,
             mask_pii = m.mask_pii == true,   -- sluice.pii.forward
             phi = phi_scan.compile(m.phi_policy),   -- sluice.phi (nil: none)
             -- sluice.strict: the max_tokens bound (nil: strict's default)
             max_output_tokens = m.max_output_tokens ~= json_null and m.max_output_tokens or nil,
             media_tasks = media_tasks, max_request_bytes = max_request_bytes,   -- sluice.media
             pool_order = order }
end

-- Backends of the compiled models by "host:port", for upstream_tls.check_shared.
local function by_address(models)
    local by_addr = {}
    for _, model in pairs(models) do
        for _, pool in pairs(model.pools) do
            for i = 1, pool.n do
                local b = pool.backends[i]
                local addr = b.host .. ":" .. b.port
                local at = by_addr[addr] or {}
                at[#at + 1] = b
                by_addr[addr] = at
            end
        end
    end
    return by_addr
end

-- The consumers of decoded snapshot `s`, by id and by name.
local function compile_consumers(s)
    local consumers = {}
    for id, c in pairs(s.consumers) do
        local allowed
        local am = c.allowed_models
        if am ~= nil and am ~= json_null then
            allowed = {}
            for _, mname in ipairs(am) do allowed[mname] = true end
        end
        local plan_id = c.plan_id
        plan_id = plan_id ~= json_null and plan_id ~= nil and tostring(plan_id) or nil
        local plan = plan_id and s.plans[plan_id]
        consumers[tostring(id)] = { id = c.id, key_id = tostring(id), name = c.name,
                                    allowed = allowed, attributes = c.attributes or {},
                                    plan_id = plan_id, plan_name = plan and plan.name,
                                    phi = phi_scan.compile(c.phi_policy) }
    end

    local by_name = {}
    for _, c in pairs(consumers) do
        if type(c.name) == "string" then by_name[c.name] = c end
    end
    return consumers, by_name
end

local function compile_keys(s)
    local keys = {}
    for hash, k in pairs(s.keys) do
        local exp = k.expires_at
        keys[hash] = {
            id = k.id,
            consumer_id = tostring(k.consumer_id),
            expires_at = exp ~= json_null and exp or nil,
        }
    end
    return keys
end

-- Decoded snapshot `s` -> the tables the hot path reads. What did not change since
-- `prev_s` (the decoded snapshot `prev` was compiled from) is taken over from `prev`:
-- each model whose document (and the mappings, and whether its fallback exists) is
-- the same keeps its pools, so its round-robin state and weight stamps carry on; the
-- consumers, keys and plans when their sections are the same. The small sections
-- (JWT issuers, content policies, breaker, routes) are compiled afresh.
local function compile(s, prev_s, prev)
    local maps = mappings.compile(s.mappings)
    local same_maps = prev and same(s.mappings, prev_s.mappings)
    local models = {}
    for name, m in pairs(s.models) do
        local old = same_maps and prev.models[name]
        local old_doc = old and prev_s.models[name]
        if old and same(m, old_doc)
           and (s.models[m.fallback_model] == nil) == (prev_s.models[m.fallback_model] == nil) then
            models[name] = old
        else
            models[name] = compile_model(s, name, m, maps)
        end
    end
    upstream_tls.check_shared(by_address(models))

    local same_plans = prev and same(s.plans, prev_s.plans)
    local consumers, by_name, compiled_plans, priorities
    if same_plans and same(s.consumers, prev_s.consumers) then
        consumers, by_name = prev.consumers, prev.consumers_by_name
    else
        consumers, by_name = compile_consumers(s)
    end
    if same_plans then
        compiled_plans, priorities = prev.plans, prev.priorities
    else
        compiled_plans, priorities = plans.compile(s.plans), admission.compile(s.plans)
    end
    local keys = prev and same(s.keys, prev_s.keys) and prev.keys or compile_keys(s)

    return { version = s.version, models = models, consumers = consumers, keys = keys,
             consumers_by_name = by_name, plans = compiled_plans,
             jwt = jwt.compile(s.jwt), content = content.compile(s.content_policies),
             breaker = breaker.settings(s.breaker), routes = splits.compile(s.routes),
             ip_limit = ip_limit.compile(s.ip_limit),   -- false: none (sluice.ip_limit)
             priorities = priorities,
             -- plans' caps on realtime sessions (sluice.realtime)
             realtime_caps = same_plans and prev.realtime_caps or realtime_plans.compile(s.plans),
             -- brief 000's model_type -> model or route name (sluice.target)
             model_types = s.model_types or {} }
end

-- The compiled snapshot this worker serves, or nil when there is none; and
-- sluice.moved's count read first (a request hands it to the other caches: ctx.target.moved).
function _M.get()
    local m = moved.read()
    if m == cached_moved then
        return cached, m
    end
    local gen = dict:get("gen")
    if gen == nil then
        return nil, m
    end
    if gen == cached_gen then
        cached_moved = m
        return cached, m
    end
    local raw = dict:get("raw")
    local s, err = cjson.decode(raw or "")
    if not s then
        ngx_log(ERR, "failed to decode stored snapshot: ", err, "; keeping the previous one")
        return cached, m
    end
    cached = compile(s, cached_doc, cached)
    cached_doc, cached_gen, cached_moved = s, gen, m
    return cached, m
end

-- What GET /internal/snapshot answers.
function _M.status()
    local version = dict:get("version")
    if not version then
        return { version = 0, loaded_at = json_null, source = "none" }
    end
    return { version = version, loaded_at = dict:get("loaded_at"), source = dict:get("source") }
end

local function lkg_path()
    return ngx.config.prefix() .. LKG_FILE
end

-- tmp file + rename: readers see the old file or the new one, never half of one.
-- FIXME: no fsync, so a power cut right after a push may leave the older file.
local function write_lkg(raw)
    local path = lkg_path()
    local tmp = path .. ".tmp." .. ngx.worker.pid()
    local f, err = io_open(tmp, "wb")
    if not f then
        return nil, "failed to open " .. tmp .. ": " .. tostring(err)
    end
    local ok, werr = f:write(raw)
    f:close()
    if not ok then
        os_remove(tmp)
        return nil, "failed to write " .. tmp .. ": " .. tostring(werr)
    end
    local renamed, rerr = os_rename(tmp, path)
    if not renamed then
        os_remove(tmp)
        return nil, "failed to rename " .. tmp .. ": " .. tostring(rerr)
    end
    return true
end

local function store(raw, version, source)
    -- safe_set: never evict, fail instead; raw before version so a reader that
    -- sees the new generation also finds the new raw.
    local ok, err = dict:safe_set("raw", raw)
    if not ok then
        return nil, "failed to store snapshot in shared dict: " .. tostring(err)
    end
    dict:set("version", version)
    dict:set("loaded_at", ngx_now())
    dict:set("source", source)
    dict:incr("gen", 1, 0)
    moved.bump()
    return true
end

local function lock()
    local deadline = ngx_now() + LOCK_WAIT
    while true do
        local ok, err = dict:add("lock", true, LOCK_TTL)
        if ok then return true end
        if err ~= "exists" then return nil, "failed to take push lock: " .. tostring(err) end
        if ngx_now() > deadline then return nil, "timed out waiting for the push lock" end
        ngx_sleep(0.005)
    end
end

-- Take a pushed snapshot. Returns version, or nil, http status, message.
function _M.push(raw)
    local s, err = cjson.decode(raw)
    if not s then
        return nil, 400, "snapshot is not valid JSON: " .. tostring(err)
    end
    local ok, verr = _M.validate(s)
    if not ok then
        return nil, 400, "invalid snapshot: " .. verr
    end

    local locked, lerr = lock()
    if not locked then
        return nil, 500, lerr
    end
    local served = dict:get("version")
    if served and s.version < served then
        dict:delete("lock")
        return nil, 409, "snapshot version " .. s.version .. " is older than the served version "
                         .. served
    end
    local stored, serr = store(raw, s.version, "push")
    if not stored then
        dict:delete("lock")
        return nil, 500, serr
    end
    -- Serving the new snapshot does not hinge on the disk; a failed LKG write is
    -- reported loudly (500) and the controller's re-push of the same version retries it.
    local written, werr = write_lkg(raw)
    dict:delete("lock")
    if not written then
        ngx_log(ERR, "snapshot ", s.version, " is served but not saved: ", werr)
        return nil, 500, "snapshot version " .. s.version
                         .. " is served but the last-known-good file was not written: " .. werr
    end
    return s.version
end

-- At start and on reload (init phase): load the LKG file when the dict holds nothing.
function _M.init()
    if dict:get("version") then
        return true
    end
    local path = lkg_path()
    local f = io_open(path, "rb")
    if not f then
        ngx_log(NOTICE, "no last-known-good snapshot at ", path, "; waiting for a push")
        return true
    end
    local raw = f:read("*a")
    f:close()
    local s, err = cjson.decode(raw or "")
    if not s then
        ngx_log(WARN, "ignoring last-known-good snapshot ", path, ": ", err)
        return nil, err
    end
    local ok, verr = _M.validate(s)
    if not ok then
        ngx_log(WARN, "ignoring last-known-good snapshot ", path, ": ", verr)
        return nil, verr
    end
    local stored, serr = store(raw, s.version, "lkg")
    if not stored then
        ngx_log(ERR, serr)
        return nil, serr
    end
    ngx_log(NOTICE, "loaded last-known-good snapshot version ", s.version)
    return true
end

return _M
