-- Prometheus metrics of the gateway: counters, gauges and histograms kept in the
-- sluice_metrics shared dict (so every worker adds to the same numbers), rendered in
-- the text exposition format by GET /metrics on the internal listener.
--
--   metrics.inc("sluice_requests_total", 1, model, backend, status, plan)
--   metrics.observe("sluice_request_duration_seconds", 0.042, model, backend)
--   metrics.set("sluice_backend_weight", 250, model, backend)
--
-- Label values are positional, in the order the family declares its labels (at most
-- 4). The dict key of each series is built once per worker and cached in nested
-- tables keyed by the label values, so a request costs table lookups, not string
-- building. Label values must come from bounded sets (the snapshot's names,
-- statuses), never straight from the request.
--
-- Counters and histograms are buffered per worker: a request adds to a plain Lua
-- table, and a timer adds the table into the shared dict every FLUSH_EVERY seconds
-- and when the worker exits. GET /metrics (render) first asks every worker to flush
-- (a generation number in the dict, polled every POLL seconds) and waits, at most
-- SYNC_WAIT, until each has: a scrape sees every request answered before it.
-- Gauges (set) go straight to the dict. Other per-worker buffers (sluice.stats)
-- ride on the same timer and scrape requests (on_flush, sync).
local ngx = ngx
local ngx_log = ngx.log
local ERR = ngx.ERR
local ngx_now = ngx.now
local str_gsub = string.gsub
local str_find = string.find
local str_sub = string.sub
local tostring = tostring
local tonumber = tonumber
local type = type
local pairs = pairs
local ipairs = ipairs
local concat = table.concat
local sort = table.sort
local clear_tab = require("table.clear")

local dict = ngx.shared.sluice_metrics

local SEP = "\1"            -- family SEP labels SEP suffix: cannot occur in a rendered label
local MAX_CACHED = 20000    -- worker-local series keys before the cache starts over
local FLUSH_EVERY = 1       -- seconds between a worker's flushes of its buffer
local POLL = 0.05           -- seconds between a worker's looks for a scrape's request
local SYNC_WAIT = 1.5       -- seconds a scrape waits for the other workers at most
local WANT = "flush:want"   -- bumped by a scrape; no SEP, so render() skips it
local ACK = "flush:ack:"    -- .. worker id: the last generation that worker flushed
local LATENCY_BUCKETS = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 }

local _M = {}

-- For a histogram's sorted bounds, a function value -> index of its bucket: the first
-- bound >= value, #bounds + 1 past the last. A binary search unrolled into nested
-- ifs when the family is registered: no loop, so the log phase stays one trace
-- (see key_for).
local function bucket_finder(bounds)
    local function search(lo, hi)
        if lo == hi then
            return "return " .. lo
        end
        local mid = math.floor((lo + hi) / 2)
        return "if v <= " .. string.format("%.17g", bounds[mid]) .. " then "
               .. search(lo, mid) .. " else " .. search(mid + 1, hi) .. " end"
    end
    return assert(loadstring("local v = ...; " .. search(1, #bounds + 1)))
end

-- name -> { type, help, labels = {...}, buckets = {...} (histograms) }
local families = {}
_M.families = families

-- Declare a metric family. Every family a module uses is declared when it loads
-- (all modules load in the init phase, so every worker knows every family).
function _M.register(name, mtype, help, labels, buckets)
    if type(name) ~= "string" or not name:find("^[a-zA-Z_:][a-zA-Z0-9_:]*$") then
        error("metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*", 2)
    end
    if mtype ~= "counter" and mtype ~= "gauge" and mtype ~= "histogram" then
        error("metric type must be counter, gauge or histogram", 2)
    end
    if #(labels or {}) > 4 then
        error("at most 4 labels per family", 2)
    end
    if mtype == "histogram" and not buckets then
        buckets = LATENCY_BUCKETS
    end
    local le = {}
    for i, b in ipairs(buckets or {}) do
        le[i] = tostring(b)
    end
    le[#le + 1] = "+Inf"
    families[name] = { type = mtype, help = help, labels = labels or {}, buckets = buckets,
                       le = le, keys = {}, cached = 0,
                       bucket_of = buckets and bucket_finder(buckets) }
end

-- The families the skeleton feeds. Other modules register theirs next to their code.
_M.register("sluice_requests_total", "counter",
            "Requests answered by the public listener.",
            { "model", "backend", "status", "plan" })
_M.register("sluice_request_duration_seconds", "histogram",
            "Time from the first byte of the request to the last byte of the answer.",
            { "model", "backend" })
_M.register("sluice_upstream_duration_seconds", "histogram",
            "Time spent with backends (all attempts) for requests that reached one.",
            { "model", "backend" })
-- With _sum and _count of the histogram above: the exact standard deviation per
-- backend, sqrt(E[x^2] - E[x]^2) (alert SluiceBackendLatencyStddevHigh).
_M.register("sluice_upstream_duration_seconds_squared_total", "counter",
            "Sum of the squares of upstream durations (seconds squared).",
            { "model", "backend" })
_M.register("sluice_upstream_retries_total", "counter",
            "Requests that were tried on a second backend after a connect failure.",
            { "model" })

-- Prometheus label value escaping; control characters would break the dict key
-- layout and the exposition format, so they become "?".
local function escape(v)
    v = tostring(v)
    if str_find(v, '[%c\\"]') then
        v = str_gsub(v, "\\", "\\\\")
        v = str_gsub(v, '"', '\\"')
        v = str_gsub(v, "%c", "?")
    end
    return v
end

local function label_string(fam, a, b, c, d)
    local names = fam.labels
    local vals = { a, b, c, d }
    local parts = {}
    for i = 1, #names do
        local v = vals[i]
        parts[i] = names[i] .. '="' .. (v == nil and "" or escape(v)) .. '"'
    end
    return concat(parts, ",")
end

local function build_key(name, fam, a, b, c, d)
    local prefix = name .. SEP .. label_string(fam, a, b, c, d) .. SEP
    if fam.type ~= "histogram" then
        return prefix
    end
    -- histogram: one key per bucket (non-cumulative, summed when rendered) and the
    -- sum; the count is the last cumulative bucket, so it costs no dict call
    local keys = {}
    for i = 1, #fam.le do
        keys[i] = prefix .. i
    end
    keys.sum = prefix .. "sum"
    return keys
end

-- node[v], made when missing.
local function child(node, v)
    local c = node[v]
    if not c then
        c = {}
        node[v] = c
    end
    return c
end

-- The cached key of one series: fam.keys[a][b][c][d]; nil labels read as "".
-- No loop over the labels (at most four): a loop inside the log phase's trace makes
-- LuaJIT abort that trace, and after a few aborts it interprets the phase for good.
local function key_for(name, a, b, c, d)
    local fam = families[name]
    if not fam then
        error("unknown metric " .. tostring(name), 3)
    end
    local n = #fam.labels
    local va, vb, vc, vd = a or "", b or "", c or "", d or ""
    local node, leaf = fam.keys, ""
    if n == 1 then
        leaf = va
    elseif n == 2 then
        node, leaf = child(node, va), vb
    elseif n == 3 then
        node, leaf = child(child(node, va), vb), vc
    elseif n == 4 then
        node, leaf = child(child(child(node, va), vb), vc), vd
    end
    local key = node[leaf]
    if key then
        return key, fam
    end
    if fam.cached >= MAX_CACHED then
        -- bounded labels make this rare (a long-lived worker after many config changes)
        fam.keys, fam.cached = {}, 0
        return key_for(name, a, b, c, d)
    end
    key = build_key(name, fam, va, vb, vc, vd)
    node[leaf] = key
    fam.cached = fam.cached + 1
    return key, fam
end

local last_full_log = 0

-- this worker's counts not yet in the dict: key -> amount
local pending = {}
local has_pending = false
local flushers = {}   -- other buffers' flush functions (on_flush)

local function add(key, value)
    local v = pending[key]
    pending[key] = v and v + value or value
    has_pending = true
end

-- Add this worker's buffer into the shared dict.
local function flush()
    for i = 1, #flushers do
        flushers[i]()
    end
    if not has_pending then
        return
    end
    has_pending = false
    for key, v in pairs(pending) do
        local _, err = dict:incr(key, v, 0)
        if err then
            local now = ngx_now()
            if now - last_full_log > 60 then
                last_full_log = now
                ngx_log(ERR, "metrics: failed to count ", key, ": ", err)
            end
        end
    end
    clear_tab(pending)
end
_M.flush = flush

-- Module load time: `fn` runs with every flush of this worker's buffer (timer,
-- worker exit, a scrape's sync).
function _M.on_flush(fn)
    flushers[#flushers + 1] = fn
end

-- init_worker: the flush timer. Every POLL seconds it looks whether a scrape asked
-- for a flush; it flushes then, every FLUSH_EVERY seconds, and when the worker exits.
function _M.init_worker()
    local id = ngx.worker.id() or 0
    local seen = dict:get(WANT) or 0
    local last = ngx_now()
    local function tick(premature)
        local want = dict:get(WANT) or 0
        local now = ngx_now()
        if premature or want ~= seen or now - last >= FLUSH_EVERY then
            flush()
            last = now
            if want ~= seen then
                seen = want
                dict:set(ACK .. id, want)
            end
        end
    end
    local ok, err = ngx.timer.every(POLL, tick)
    if not ok then
        -- counts then reach the dict only when this worker serves a scrape
        ngx_log(ERR, "metrics: no flush timer: ", err)
    end
end

-- Before a scrape: every worker's buffer into the dict (this one's now, the others'
-- within POLL seconds; at most SYNC_WAIT). Yields: content phase only.
local function sync()
    flush()
    local n = ngx.worker.count()
    if n <= 1 then
        return
    end
    local gen = dict:incr(WANT, 1, 0)
    if not gen then
        return
    end
    dict:set(ACK .. (ngx.worker.id() or 0), gen)
    local deadline = ngx_now() + SYNC_WAIT
    while true do
        local all = true
        for i = 0, n - 1 do
            if (dict:get(ACK .. i) or 0) < gen then
                all = false
                break
            end
        end
        if all or ngx_now() > deadline then
            return
        end
        ngx.sleep(POLL / 2)
    end
end
_M.sync = sync

-- Add `value` (default 1) to a counter.
function _M.inc(name, value, a, b, c, d)
    add(key_for(name, a, b, c, d), value or 1)
end

-- Set a gauge.
function _M.set(name, value, a, b, c, d)
    dict:set(key_for(name, a, b, c, d), value)
end

-- Record one observation in a histogram.
function _M.observe(name, value, a, b, c, d)
    local keys, fam = key_for(name, a, b, c, d)
    add(keys[fam.bucket_of(value)], 1)
    add(keys.sum, value)
end

local function fmt(v)
    if v == math.huge then return "+Inf" end
    if v ~= v then return "NaN" end
    if v == -math.huge then return "-Inf" end
    return tostring(v)
end

local function render_family(out, name, fam, series)
    out[#out + 1] = "# HELP " .. name .. " " .. fam.help
    out[#out + 1] = "# TYPE " .. name .. " " .. fam.type
    local labelsets = {}
    for ls in pairs(series) do
        labelsets[#labelsets + 1] = ls
    end
    sort(labelsets)
    for _, ls in ipairs(labelsets) do
        local s = series[ls]
        local braced = ls == "" and "" or "{" .. ls .. "}"
        if fam.type ~= "histogram" then
            out[#out + 1] = name .. braced .. " " .. fmt(s[""] or 0)
        else
            local sep = ls == "" and "" or ","
            local cum = 0
            for i, le in ipairs(fam.le) do
                cum = cum + (s[tostring(i)] or 0)
                out[#out + 1] = name .. "_bucket{" .. ls .. sep .. 'le="' .. le .. '"} '
                                .. fmt(cum)
            end
            out[#out + 1] = name .. "_sum" .. braced .. " " .. fmt(s.sum or 0)
            out[#out + 1] = name .. "_count" .. braced .. " " .. fmt(cum)
        end
    end
end

-- The exposition text: every declared family with what the dict holds, once every
-- worker flushed its buffer (content phase: it may wait up to SYNC_WAIT).
function _M.render()
    sync()
    local by_family = {}
    for _, key in ipairs(dict:get_keys(0)) do
        local s1 = str_find(key, SEP, 1, true)
        local s2 = s1 and str_find(key, SEP, s1 + 1, true)
        if s2 then
            local name = str_sub(key, 1, s1 - 1)
            local ls = str_sub(key, s1 + 1, s2 - 1)
            local suffix = str_sub(key, s2 + 1)
            local v = tonumber(dict:get(key))
            if families[name] and v then
                local series = by_family[name]
                if not series then
                    series = {}
                    by_family[name] = series
                end
                local s = series[ls]
                if not s then
                    s = {}
                    series[ls] = s
                end
                s[suffix] = v
            end
        end
    end
    local names = {}
    for name in pairs(families) do
        names[#names + 1] = name
    end
    sort(names)
    local out = {}
    for _, name in ipairs(names) do
        render_family(out, name, families[name], by_family[name] or {})
    end
    out[#out + 1] = ""
    return concat(out, "\n")
end

_M.escape = escape

return _M
