-- What the gateway records about each request of the public listener: the metrics
-- (sluice.metrics) and the nginx variables that nginx's own buffered access_log turns
-- into one JSON line (log_format sluice_json in nginx/nginx.conf.tmpl).
--
-- The facts live in nginx variables, not ngx.ctx, because an error_page redirect
-- (502/504 from nginx itself) clears ngx.ctx but keeps variables. Never a key or a
-- token: the line names the consumer, not its credentials.
local metrics = require("sluice.metrics")

local ngx = ngx
local ngx_var = ngx.var
local ngx_now = ngx.now
local req_start_time = ngx.req.start_time
local tonumber = tonumber
local tostring = tostring
local type = type
local floor = math.floor
local str_find = string.find
local gmatch = string.gmatch

local NO_PLAN = "none"

local _M = {}

metrics.register("sluice_policy_refused_total", "counter",
                 "Requests refused with 451 by a content policy, by policy name.",
                 { "model", "policy" })

-- Access phase: a content policy refused the request (`policy`: its name).
function _M.policy_refused(model_name, policy)
    metrics.inc("sluice_policy_refused_total", 1, model_name, policy)
end

local function backend_name(b)
    return b.name or tostring(b.id)
end

-- Access phase, as each fact becomes known: who calls, which model (only names
-- from the snapshot, so label values stay a bounded set), which backend.
function _M.consumer(consumer)
    ngx_var.sluice_consumer = consumer.name or tostring(consumer.id)
    local plan = consumer.plan_name
    ngx_var.sluice_plan = type(plan) == "string" and plan or NO_PLAN
end

-- `name`: the model asked for, then the one a route chose (sluice.routes).
function _M.model(name)
    ngx_var.sluice_model = name
end

function _M.backend(backend)
    ngx_var.sluice_backend = backend_name(backend)
end

-- Balancer phase, on a retry: the line and the metrics name the backend that answered.
function _M.retried(ctx)
    local b = ctx.pool.backends[ctx.backend_index]
    ngx_var.sluice_backend = backend_name(b)
    if ctx.tries == 2 then
        metrics.inc("sluice_upstream_retries_total", 1, ngx_var.sluice_model)
    end
end

-- $upstream_response_time: "0.012", "0.001, 0.011" after a retry, "-" parts for
-- attempts that got nothing, nil when no backend was tried. Seconds, summed.
local function upstream_seconds()
    local t = ngx_var.upstream_response_time
    if not t then
        return nil
    end
    if not str_find(t, ",", 1, true) then
        return tonumber(t)
    end
    local sum
    for part in gmatch(t, "[%d.]+") do
        sum = (sum or 0) + (tonumber(part) or 0)
    end
    return sum
end

-- Log phase (runs before nginx's access_log writes the line).
function _M.log()
    local model = ngx_var.sluice_model or ""
    local backend = ngx_var.sluice_backend or ""
    local plan = ngx_var.sluice_plan
    if plan == nil or plan == "" then
        plan = NO_PLAN
    end
    metrics.inc("sluice_requests_total", 1, model, backend, ngx.status, plan)

    -- ngx.now() is the cached time of this event-loop turn while nginx measures the
    -- upstream time afresh: the total can read a little short, never below upstream.
    local up = upstream_seconds()
    local total = ngx_now() - req_start_time()
    if up and total < up then
        total = up
    elseif total < 0 then
        total = 0
    end
    metrics.observe("sluice_request_duration_seconds", total, model, backend)
    ngx_var.sluice_latency_ms = floor(total * 1000 + 0.5)

    if up then
        metrics.observe("sluice_upstream_duration_seconds", up, model, backend)
        metrics.inc("sluice_upstream_duration_seconds_squared_total", up * up, model, backend)
        ngx_var.sluice_upstream_ms = floor(up * 1000 + 0.5)
    end
end

return _M
