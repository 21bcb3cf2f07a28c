-- What the gateway records about each request of the public listener: the metrics
-- (sluice.metrics) and the one JSON line nginx's own buffered access_log writes
-- (made by sluice.accesslog; log_format sluice_json in nginx/nginx.conf.tmpl).
--
-- The facts live in the request's context (sluice/context.lua: restored after an
-- error_page redirect); the log phase makes the line once. Never a key or a token:
-- the line names the consumer, not its credentials.
local metrics = require("sluice.metrics")
local accesslog = require("sluice.accesslog")
local ms_of = require("sluice.nginx_time").ms
local buffer = require("string.buffer")
local var_set = require("sluice.ffi").var_set   -- the private FFI, checked at start

local ngx = ngx
local ngx_var = ngx.var
local ngx_now = ngx.now
local req_start_time = ngx.req.start_time
local get_method = ngx.req.get_method
local tostring = tostring
local ngx_log = ngx.log
local ERR = ngx.ERR
local type = type
local floor = math.floor
local str_find = string.find
local gmatch = string.gmatch

local NO_PLAN = "none"
local LOG_VAR = "sl_line"

-- The worker's buffer for the access-log line (one request's log phase at a time).
local line = buffer.new(1024)

-- $sl_line = the bytes of `buf`, by the FFI call resty.core's ngx.var uses, given
-- the buffer's bytes instead of a Lua string: nginx copies them into the request's
-- pool.
local function set_log_line(buf)
    local value, len = buf:ref()
    local ok, err = var_set(LOG_VAR, value, len)
    if not ok then
        ngx_log(ERR, "the access-log line was not set: ", err)
    end
end

local _M = {}

metrics.register("sluice_policy_refused_total", "counter",
                 "Requests refused with 451 by a content policy, by policy name.",
                 { "model", "policy" })

-- Access phase: a content policy refused the request (`policy`: its name).
function _M.policy_refused(model_name, policy)
    metrics.inc("sluice_policy_refused_total", 1, model_name, policy)
end

-- The backend that answered (the last one tried), or "".
-- The name of the backend this request went to ("" before the balancer chose one).
local function backend_name(ctx)
    local held = ctx.backend
    local pool = held.pool
    if not pool then
        return ""
    end
    local b = pool.backends[held.index]
    return b.name or tostring(b.id)
end
_M.backend_name = backend_name

-- Balancer phase, on a retry.
function _M.retried(ctx)
    if ctx.backend.tries == 2 then
        metrics.inc("sluice_upstream_retries_total", 1, ctx.target.model_name)
    end
end

-- `t`: $upstream_response_time: "0.012", "0.001, 0.011" after a retry, "-" parts for
-- attempts that got nothing, nil when no backend was tried. Milliseconds, summed.
local function upstream_ms(t)
    if not t then
        return nil
    end
    if not str_find(t, ",", 1, true) then
        return ms_of(t)
    end
    local sum
    for part in gmatch(t, "[%d.]+") do
        sum = (sum or 0) + (ms_of(part) or 0)
    end
    return sum
end

-- Log phase (runs before nginx's access_log writes the line), given
-- $upstream_response_time and $bytes_sent (read once by phases.log): the metrics, and
-- the line (sluice.accesslog) in $sl_line, the one variable log_format
-- sluice_json reads.
function _M.log(ctx, upstream_times, bytes_sent)
    local model = ctx.target.model_name or ""
    local backend = backend_name(ctx)
    local consumer = ctx.caller.consumer
    local plan, who = NO_PLAN, nil
    if consumer then
        local p = consumer.plan_name
        if type(p) == "string" then
            plan = p
        end
        who = consumer.name or tostring(consumer.id)
    end
    local status = ngx.status
    metrics.inc("sluice_requests_total", 1, model, backend, status, plan)

    -- ngx.now() is the cached time of this event-loop turn while nginx measures the
    -- upstream time afresh: the total can read a little short, never below upstream.
    local up_ms = upstream_ms(upstream_times)
    local up = up_ms and up_ms / 1000
    local now = ngx_now()
    local total = now - req_start_time()
    if up and total < up then
        total = up
    elseif total < 0 then
        total = 0
    end
    metrics.observe("sluice_request_duration_seconds", total, model, backend)
    if up then
        metrics.observe("sluice_upstream_duration_seconds", up, model, backend)
        metrics.inc("sluice_upstream_duration_seconds_squared_total", up * up, model, backend)
        up_ms = floor(up_ms + 0.5)
    end
    line:reset()
    accesslog.put(line, ctx, now, get_method(), ctx.req.uri or ngx_var.uri, status, bytes_sent,
                  who, consumer and plan, model, backend, floor(total * 1000 + 0.5), up_ms)
    set_log_line(line)
end

return _M
