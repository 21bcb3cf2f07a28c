-- Usage per consumer, model and UTC day, for the controller to collect into Postgres
-- (usage_daily), and the fleet's usage pushed back so that quotas survive restarts.
--
-- Counting (shared dict sluice_usage): "<YYYYMMDD>|<consumer id>|<model>|<f>" with
-- f = r (requests), p / c / t (prompt / completion / total tokens), a / x / i (audio
-- milliseconds, characters spoken, images made: sluice.media_usage), s (realtime session
-- seconds, sluice.realtime_pump: each session's length rounded up). A request adds
-- one to r in access when the plan admitted it (what the quota counters count too),
-- and its tokens in log when the answer reported `usage` (consumers on a plan), to a
-- per-worker buffer (plain Lua numbers); the metrics flush (sluice.metrics: every
-- second, at worker exit, and when GET /internal/usage asks: metrics.sync) adds the
-- buffer into the dict, as it does for sluice.stats. Cumulative since the gateway
-- started; "boot" (a random id, kept across `nginx -s reload`, new on a restart) and
-- "started_at" let the controller take differences safely (docs/contracts.md).
--
-- Seeding: POST /internal/usage carries, per consumer and model, what the rest of the
-- fleet used (today's requests, this month's requests and tokens: Postgres totals
-- minus what this boot of this gateway has already reported). Its sum per quota
-- counter is an offset; each push adds (new offset - previous offset) to the
-- sluice_limits counter itself, so limits.count pays nothing for it.
local cjson = require("cjson.safe")
local plans = require("sluice.plans")
local limits = require("sluice.limits")
local metrics = require("sluice.metrics")
local clear_tab = require("table.clear")
local tokens = require("sluice.tokens")
local media_usage = require("sluice.media_usage")
local media_caps = require("sluice.media_caps")

local ngx = ngx
local ngx_time = ngx.time
local ngx_log = ngx.log
local ERR = ngx.ERR
local os_date = os.date
local pairs = pairs
local type = type
local tonumber = tonumber
local tostring = tostring
local str_sub = string.sub
local ceil = math.ceil
local str_format = string.format
local str_byte = string.byte
local io_open = io.open
local floor = math.floor

local dict = ngx.shared.sluice_usage
local limits_dict = ngx.shared.sluice_limits

local KEEP = 3 * 86400     -- a day's counters outlive the day by this (controller away)
-- requests, prompt / completion / total tokens; audio ms, characters spoken, images
-- made (sluice.media_usage); realtime session seconds (sluice.realtime_pump)
local FIELDS = { "r", "p", "c", "t", "a", "x", "i", "s" }
local N_FIELDS = #FIELDS

local _M = {}

-- worker-local: keys[consumer id][model] = the counters of that row for day `day`:
-- its dict keys { r =, p =, c =, t = }, when they expire (`expires`, unix s), and
-- what this worker has counted since its last flush (nr, np, nc, nt), so the hot path
-- concatenates nothing after a row's first use in a day and calls no dict at all
local sec, day, expires, keys = nil, nil, nil, {}
-- the rows with counts not yet in the dict
local dirty, n_dirty = {}, 0

local function keys_for(cid, model)
    local now = ngx_time()
    if now ~= sec then
        sec = now
        local d = os_date("!%Y%m%d", now)
        if d ~= day then
            day, keys = d, {}
            expires = now + limits.to_next_day(now) + KEEP
        end
    end
    local per = keys[cid]
    if not per then
        per = {}
        keys[cid] = per
    end
    local k = per[model]
    if not k then
        local base = day .. "|" .. cid .. "|" .. model .. "|"
        k = { r = base .. "r", p = base .. "p", c = base .. "c", t = base .. "t",
              a = base .. "a", x = base .. "x", i = base .. "i", s = base .. "s",
              expires = expires, nr = 0, np = 0, nc = 0, nt = 0, na = 0, nx = 0, ni = 0,
              ns = 0,
              dirty = false }
        per[model] = k
    end
    return k
end

-- Add `n` to field `f` ("nr", "np", "nc" or "nt") of row `k`, in this worker's buffer.
local function count(k, f, n)
    k[f] = k[f] + n
    if not k.dirty then
        k.dirty = true
        n_dirty = n_dirty + 1
        dirty[n_dirty] = k
    end
end

local function put(key, n, ttl)
    if n ~= 0 then
        local _, err = dict:incr(key, n, 0, ttl)
        if err then
            ngx_log(ERR, "usage counter: ", err)
        end
    end
end

-- The buffer into the dict (sluice.metrics calls it with its own flush).
local function flush()
    if n_dirty == 0 then
        return
    end
    local now = ngx_time()
    for i = 1, n_dirty do
        local k = dirty[i]
        local ttl = k.expires - now
        if ttl > 0 then   -- else the row's day is long gone: nobody collects it now
            put(k.r, k.nr, ttl)
            put(k.p, k.np, ttl)
            put(k.c, k.nc, ttl)
            put(k.t, k.nt, ttl)
            if k.na ~= 0 or k.nx ~= 0 or k.ni ~= 0 then
                put(k.a, k.na, ttl)
                put(k.x, k.nx, ttl)
                put(k.i, k.ni, ttl)
                k.na, k.nx, k.ni = 0, 0, 0
            end
            if k.ns ~= 0 then
                put(k.s, k.ns, ttl)
                k.ns = 0
            end
        end
        k.nr, k.np, k.nc, k.nt, k.dirty = 0, 0, 0, 0, false
    end
    clear_tab(dirty)
    n_dirty = 0
end
metrics.on_flush(flush)

local function random_id()
    local f = io_open("/dev/urandom", "rb")
    local raw = f and f:read(8)
    if f then f:close() end
    if not raw or #raw ~= 8 then
        return str_format("%d-%d", ngx.now() * 1000, math.random(1, 2 ^ 30))
    end
    local out = {}
    for i = 1, 8 do out[i] = str_format("%02x", str_byte(raw, i)) end
    return table.concat(out)
end

-- A new boot id unless the dict already has one (reload). Without one while counters
-- exist (evicted: should not happen), they are dropped rather than counted twice.
local function ensure_boot()
    local boot = dict:get("boot")
    if boot then
        return boot, dict:get("started_at")
    end
    dict:flush_all()
    boot = random_id()
    local started = ngx.now()
    dict:safe_set("started_at", started)
    dict:safe_set("boot", boot)
    return boot, started
end

-- init phase
function _M.init()
    ensure_boot()
end

-- Access phase, once the plan admitted the request. Chat and completion answers of a
-- consumer on a plan are scanned for `usage` (tokens.lua), token quota or not. Not
-- for consumers without a plan (trusted callers, no quotas): for them reading the
-- answer would cost ~6 us of CPU per request, this function ~0.1 us (bench/README.md).
function _M.count(ctx, endpoint, consumer, model_name)
    local k = keys_for(consumer.key_id, model_name)
    count(k, "nr", 1)
    local u = tokens.of(ctx)
    u.keys = k
    local kind = endpoint.kind
    if consumer.plan_id and (kind == "chat" or kind == "completion") then
        u.scan = true
    end
end

-- Access phase: the request became an async job (plan `buffer_at_peak`); the job
-- counts itself when it runs.
function _M.uncount(ctx)
    local u = ctx.usage
    local k = u and u.keys
    if k then
        u.keys = nil
        tokens.scan(ctx, false)
        count(k, "nr", -1)
    end
end

-- Log phase: the tokens the answer reported (ctx.usage, set by tokens.lua); the
-- audio seconds, characters and images of audio and image work (sluice.media_usage).
function _M.log(ctx)
    local u = ctx.usage
    local k = u and u.keys
    if (u and u.media) ~= nil or ctx.conv ~= nil then
        local status = ngx.status
        local audio, chars, images = media_usage.bill(ctx, status)
        media_caps.settle(ctx, status, audio)   -- the plan's daily caps
        if k and audio then
            if audio > 0 then count(k, "na", floor(audio * 1000 + 0.5)) end
            if chars > 0 then count(k, "nx", chars) end
            if images > 0 then count(k, "ni", images) end
        end
    end
    local total = k and u.total
    if not total then
        return
    end
    local p = u.prompt
    local c = u.completion
    if p then count(k, "np", p) end
    if c then count(k, "nc", c) end
    count(k, "nt", total)
end

-- Log phase of a realtime session (sluice.realtime_pump): its length, in whole seconds
-- (rounded up), into the session-seconds counter of its consumer and model.
function _M.seconds(ctx, seconds)
    local u = ctx.usage
    local k = u and u.keys
    if k and seconds > 0 then
        count(k, "ns", ceil(seconds))
    end
end

-- GET /internal/usage: {"boot", "started_at", "counters": {"<day>|<cid>|<model>":
-- [requests, prompt, completion, total, audio ms, characters, images, session seconds]},
-- "offsets": {"<quota counter>": n} (what the last push added), "seed_version",
-- "seed_snapshot", "snapshot_version"} (the controller pushes again when the last push
-- was applied under another snapshot: plans may have changed).
function _M.report(snap)
    metrics.sync()   -- every worker's buffer first: the counts of every answered request
    local boot, started = ensure_boot()
    local counters = {}
    for _, key in pairs(dict:get_keys(0)) do
        local last = #key
        if str_byte(key, last - 1) == 124 then   -- "...|f"
            local v = dict:get(key)
            if v then
                local row_key = str_sub(key, 1, last - 2)
                local row = counters[row_key]
                if not row then
                    row = { 0, 0, 0, 0, 0, 0, 0, 0 }
                    counters[row_key] = row
                end
                local f = str_sub(key, last)
                for i = 1, N_FIELDS do
                    if FIELDS[i] == f then row[i] = v end
                end
            end
        end
    end
    return { boot = boot, started_at = started, counters = counters,
             offsets = cjson.decode(dict:get("offsets") or "{}") or {},
             seed_version = dict:get("seed_version") or 0,
             seed_snapshot = dict:get("seed_snapshot") or 0,
             snapshot_version = snap and snap.version or 0 }
end

-- The quota counters (sluice_limits keys, as policy.lua and tokens.lua name them)
-- that the pushed usage adds to, with their amounts.
local function offsets(snap, usage, today, month)
    local out = {}
    local function add(key, n)
        if n > 0 then out[key] = (out[key] or 0) + n end
    end
    for cid, models in pairs(usage) do
        local consumer = snap.consumers[cid]
        local plan = consumer and consumer.plan_id and snap.plans[consumer.plan_id]
        if plan and type(models) == "table" then
            for model, n in pairs(models) do
                local lim = plans.limits(plan, model)
                local d, m, t = tonumber(n[1]) or 0, tonumber(n[2]) or 0, tonumber(n[3]) or 0
                if lim.daily and today then
                    add("qd:" .. cid .. lim.daily_scope .. ":" .. today, d)
                end
                if lim.monthly and month then
                    add("qm:" .. cid .. lim.monthly_scope .. ":" .. month, m)
                end
                if lim.tokens and month then
                    add("tm:" .. cid .. lim.tokens_scope .. ":" .. month, t)
                end
                local caps = lim.media_caps   -- today's audio ms, characters, images
                if caps and today then
                    local tail = cid .. ":" .. today
                    if caps.audio then add("ma:" .. tail, tonumber(n[4]) or 0) end
                    if caps.chars then add("mc:" .. tail, tonumber(n[5]) or 0) end
                    if caps.images then add("mi:" .. tail, tonumber(n[6]) or 0) end
                end
            end
        end
    end
    return out
end

local function validate(doc)
    if type(doc) ~= "table" then return "body: must be a JSON object" end
    if type(doc.boot) ~= "string" then return "boot: must be a string" end
    if type(doc.version) ~= "number" or doc.version < 1 then
        return "version: must be an integer >= 1"
    end
    if type(doc.day) ~= "string" or type(doc.month) ~= "string" then
        return "day, month: must be strings (YYYYMMDD, YYYYMM)"
    end
    if type(doc.usage) ~= "table" then return "usage: must be an object" end
    for cid, models in pairs(doc.usage) do
        if type(models) ~= "table" then return "usage." .. tostring(cid) .. ": must be an object" end
        for model, n in pairs(models) do
            if type(n) ~= "table" then
                return "usage." .. tostring(cid) .. "." .. tostring(model)
                       .. ": must be [requests today, requests this month, tokens this month"
                   .. " (, audio ms, characters, images today)]"
            end
        end
    end
    return nil
end

-- POST /internal/usage. Returns the version applied, or nil, status, message.
function _M.push(raw, snap)
    local doc = cjson.decode(raw)
    local bad = validate(doc)
    if bad then
        return nil, 400, bad
    end
    if not snap then
        return nil, 503, "no snapshot yet: usage cannot be mapped to quotas"
    end
    local boot = ensure_boot()
    if doc.boot ~= boot then
        return nil, 409, "usage is for gateway boot " .. doc.boot .. ", this is " .. boot
    end
    if not dict:add("seed_lock", true, 5) then
        return nil, 409, "another usage push is being applied"
    end
    local current = dict:get("seed_version") or 0
    if doc.version <= current then
        dict:delete("seed_lock")
        return nil, 409, "usage version " .. doc.version .. " is not newer than " .. current
    end
    local now = ngx_time()
    local today, month = os_date("!%Y%m%d", now), os_date("!%Y%m", now)
    local new = offsets(snap, doc.usage, doc.day == today and today,
                        doc.month == month and month)
    local old = cjson.decode(dict:get("offsets") or "{}") or {}
    local day_ttl = limits.to_next_day(now) + 60
    local month_ttl = limits.to_next_month(now) + 60
    for key, n in pairs(new) do
        local delta = n - (old[key] or 0)
        if delta > 0 then
            local daily = str_sub(key, 2, 3) ~= "m:"   -- "qd:", "ma:", "mc:", "mi:"
            limits_dict:incr(key, delta, 0, daily and day_ttl or month_ttl)
        elseif delta < 0 then
            limits_dict:incr(key, delta)   -- no-op when the counter has expired
        end
    end
    for key, n in pairs(old) do
        if new[key] == nil then
            limits_dict:incr(key, -n)
        end
    end
    local encoded = cjson.encode(new)
    local ok, err = dict:safe_set("offsets", encoded)
    if ok then
        ok, err = dict:safe_set("seed_version", doc.version)
    end
    if ok then
        ok, err = dict:safe_set("seed_snapshot", snap.version)
    end
    dict:delete("seed_lock")
    if not ok then
        ngx_log(ERR, "usage offsets not stored: ", err)
        return nil, 500, "usage offsets not stored: " .. tostring(err)
    end
    return doc.version
end

return _M
