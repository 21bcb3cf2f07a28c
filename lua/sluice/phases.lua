-- Entry points: each *_by_lua_block in nginx/nginx.conf.tmpl is one call here.
-- Per-request state lives in ngx.ctx; the request id lives in $sluice_request_id
-- because ngx.ctx does not survive error_page's internal redirect.
local config = require("sluice.config")
local errors = require("sluice.errors")
local auth = require("sluice.auth")
local endpoints = require("sluice.endpoints")
local router = require("sluice.router")
local convert = require("sluice.convert")
local cache = require("sluice.cache")
local catalog = require("sluice.catalog")
local balancer = require("sluice.balancer")
local internal = require("sluice.internal")
local observe = require("sluice.observe")
local policy = require("sluice.policy")
local content = require("sluice.content")
local routes = require("sluice.routes")
local fallback = require("sluice.fallback")
local health = require("sluice.health")
local admission = require("sluice.admission")
local usage = require("sluice.usage")
local pii = require("sluice.pii")
local jobs = require("sluice.jobs")
local upstream_tls = require("sluice.upstream_tls")
local breaker_defaults = require("sluice.breaker").settings(nil)

local ngx = ngx
local ngx_var = ngx.var
local ngx_header = ngx.header
local ngx_log = ngx.log
local ERR = ngx.ERR
local re_find = ngx.re.find
local tonumber = tonumber

local REQUEST_ID = [[^[A-Za-z0-9._:-]{1,128}\z]]

local _M = {}

function _M.init(opts)
    internal.init(opts.token)
    jobs.init(opts.token)   -- the worker token of jobs run on a consumer's behalf
    pii.configure(opts.log_excerpts)
    require("sluice.redis_limits").configure(opts.redis)   -- cluster mode, when set
    usage.init()
    upstream_tls.init()   -- which backend CA locations this config has
    -- Loads lkg/snapshot.json when the shared dict is empty (fresh start); after
    -- `nginx -s reload` the dict still holds the served snapshot and wins.
    config.init()
end

function _M.init_worker()
    routes.init_worker()
end

-- Keep a valid incoming X-Request-Id, else nginx's $request_id (32 hex digits
-- from 16 random bytes).
local function request_id()
    local id = ngx_var.sluice_request_id
    if id and id ~= "" then
        return id
    end
    id = ngx_var.http_x_request_id
    if not id or not re_find(id, REQUEST_ID, "jo") then
        id = ngx_var.request_id
    end
    ngx_var.sluice_request_id = id
    return id
end

function _M.rewrite()
    request_id()
end

function _M.access()
    local ctx = ngx.ctx

    local endpoint, path_model, err_type, msg, allow = endpoints.match()
    if not endpoint then
        local status = path_model   -- on failure: nil, status, type, message[, allow]
        if status == 405 then
            ngx_header["Allow"] = allow
        end
        return errors.exit(status, err_type, msg)
    end

    local snap = config.get()
    if not snap then
        return errors.exit(503, "backend_unavailable", "the gateway has no configuration yet",
                           { retry_after = 1 })
    end

    -- on success: consumer, attributes; on failure: nil, status, type, message
    local consumer, status
    consumer, status, err_type, msg = jobs.authenticate(snap)   -- auth.authenticate, or a job's worker
    if not consumer then
        return errors.exit(status, err_type, msg)
    end
    -- what routing conditions test: the consumer's attributes, JWT claims over them
    ctx.attributes = status
    observe.consumer(consumer)
    if endpoint.jobs then return jobs.serve(snap, consumer) end   -- /v1/jobs, /v1/files, /v1/batches

    if endpoint.method == "GET" then
        return catalog.serve(snap, consumer, path_model)
    end

    local model_name, doc
    model_name, doc, err_type, msg = router.model_name(endpoint, path_model)
    if not model_name then
        return errors.exit(doc, err_type, msg)
    end

    -- a model, or a route over models (sluice.routes picks one below)
    if not snap.models[model_name] and not snap.routes[model_name] then
        return errors.exit(404, "not_found", "unknown model " .. model_name)
    end
    observe.model(model_name)
    if not auth.allowed(consumer, model_name) then
        return errors.exit(403, "forbidden", "this key may not use model " .. model_name)
    end
    if jobs.wanted() then return jobs.submit(snap, consumer, model_name) end   -- Prefer: respond-async

    local extra
    status, err_type, msg, extra = policy.check(ctx, snap, consumer, model_name,
                                                endpoint.caller == "openai")
    if status then
        return errors.exit(status, err_type, msg, extra)
    end
    usage.count(ctx, endpoint, consumer, model_name)

    local violated = content.check(snap, model_name, ctx.request_doc)
    if violated then
        observe.policy_refused(model_name, violated)
        return errors.exit(451, "policy_violation",
                           "the request was refused by content policy " .. violated)
    end

    model_name = routes.choose(ctx, snap, endpoint, model_name, consumer)

    local pool, model
    pool, model, err_type, msg = router.pool(snap, endpoint, model_name)
    if not pool then
        return errors.exit(model, err_type, msg)
    end
    observe.model(model_name)

    cache.lookup(ctx, endpoint, doc, model, consumer)   -- a hit ends the request here
    admission.admit(snap, consumer, model_name, pool)   -- a saturated pool may end it here

    local backend, retry_after = balancer.choose(ctx, pool, snap.breaker)
    if not backend then
        health.refuse(pool, model_name)   -- every backend loading: 503 "model loading"
        if retry_after then
            return errors.exit(503, "backend_unavailable", "every backend of model "
                               .. model_name .. " has an open circuit",
                               { retry_after = retry_after > 0 and retry_after or 1 })
        end
        return errors.exit(503, "backend_unavailable",
                           "no backend of model " .. model_name .. " is available")
    end
    ctx.model = model
    ctx.consumer = consumer
    observe.backend(backend)
    doc = pii.forward(model, doc)   -- the fallback, if any, gets the masked body too
    if not doc then
        return errors.exit(500, "internal_error", "the request could not be masked")
    end
    fallback.arm(model)   -- before convert.prepare() rewrites the body
    local path
    path, status, err_type, msg = convert.prepare(ctx, endpoint, doc, model_name, pool)
    if not path then
        return errors.exit(status, err_type, msg)
    end
    local args = ngx_var.args
    if args and args ~= "" then
        path = path .. "?" .. args
    end
    -- FIXME: a retry (balancer) reuses this Host; it picks only backends with the
    -- same base_path and credentials, so the URI and Authorization still fit.
    ngx_var.sluice_upstream_host = backend.host_header
    ngx_var.sluice_upstream_auth = backend.auth_header
    ngx_var.sluice_upstream_uri = backend.base_path .. path
    upstream_tls.forward(ctx, backend)   -- a backend of another trust set: ngx.exec
end

function _M.balancer()
    local ctx = ngx.ctx
    balancer.balance(ctx, ctx.model)
    admission.attempt(ctx)
    if (ctx.tries or 1) > 1 then
        observe.retried(ctx)
    end
end

function _M.header_filter()
    local id = ngx_var.sluice_request_id
    if id and id ~= "" then
        ngx_header["X-Request-Id"] = id
    end
    local ctx = ngx.ctx
    policy.headers(ctx)
    convert.header_filter(ctx)
    cache.header_filter(ctx)
    routes.header(ctx, ngx_header)
    fallback.header_filter(ctx)
end

-- Conversion first: token accounting then reads the answer the caller gets, in
-- OpenAI's shape where the caller speaks OpenAI.
function _M.body_filter()
    local ctx = ngx.ctx
    convert.body_filter(ctx)
    cache.body_filter(ctx)
    policy.body_filter(ctx)
end

function _M.log()
    local ctx = ngx.ctx
    policy.release(ctx)   -- quota bookkeeping first: the next request may be waiting
    admission.release()
    usage.log(ctx)
    observe.log()
    local tried = ngx_var.sluice_tried
    if tried and tried ~= "" then
        local snap = config.get()
        balancer.log(tried, ngx_var.upstream_status, ngx_var.upstream_response_time,
                     snap and snap.breaker or breaker_defaults)
    end
end

-- @sluice_fallback: a model's fallback after its backend timed out.
function _M.fallback()
    fallback.access()
end

-- @sluice_tls_*: an https backend's own trust set (lua/sluice/upstream_tls.lua).
function _M.tls_resume()
    upstream_tls.resume()
end

function _M.internal()
    request_id()
    return internal.handle()
end

-- Did the last upstream attempt answer with an HTTP status (as opposed to nginx
-- failing to connect or timing out)? $upstream_header_time is "-" without headers.
local function backend_answered()
    local times = ngx_var.upstream_header_time
    if not times then
        return false
    end
    local last = times:match("([^,%s:]+)%s*$")
    return last ~= nil and tonumber(last) ~= nil
end

-- Named location behind `error_page`: nginx's own 413/494/500/502/503/504 and backend
-- 5xx (proxy_intercept_errors) leave in the error template.
function _M.error_page()
    request_id()
    local status = ngx.status
    fallback.try(status)   -- a 504 with a fallback model does not come back
    policy.failed()
    local err_type, msg
    -- no answer from an https backend: was it the handshake? (reads nginx's log;
    -- an answer first, so an older line about this connection cannot be taken)
    local tls_failure = status == 502 and not backend_answered()
                        and upstream_tls.handshake_failure()
    if tls_failure then
        -- the backend got no request: its certificate or ours was refused
        err_type, msg = "backend_tls_error", "backend TLS handshake failed: " .. tls_failure
        upstream_tls.count_failure(ngx_var.sluice_model, ngx_var.sluice_backend)
    elseif backend_answered() then
        if status < 500 then
            -- only 413 is intercepted below 500: the backend refused the body
            err_type, msg = errors.type_for(status), "the backend refused the request ("
                                                     .. status .. ")"
        elseif status == 503 then
            err_type, msg = "backend_unavailable", "the backend is unavailable (503)"
        elseif status == 504 then
            err_type, msg = "backend_timeout", "the backend timed out (504)"
        else
            msg = "the backend failed (" .. status .. ")"
            status, err_type = 502, "backend_error"
        end
    elseif status == 413 then
        err_type, msg = "payload_too_large", "request body is larger than this gateway accepts"
    elseif status == 494 or status == 400 then
        -- only 494 is routed here; nginx shows it as 400 by the time we run
        status, err_type, msg = 400, "invalid_request", "request headers are too large"
    elseif not errors.MESSAGES[status] then
        ngx_log(ERR, "unexpected status ", status, " in error page")
        status = 500
    end
    ngx.status = status
    ngx_var.sluice_error_type = err_type or errors.type_for(status)
    ngx_header["Content-Type"] = "application/json"
    ngx_header["Content-Length"] = nil
    ngx.print(errors.body(status, err_type, msg), "\n")
end

return _M
