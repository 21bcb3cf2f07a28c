-- Entry points: each *_by_lua_block in nginx/nginx.conf.tmpl is one call here, and
-- the only module that ends a request or sends a response: the access steps return
-- what they computed or a status and error. Per-request state lives in ngx.ctx, the
-- context described in sluice/context.lua, carried across error_page and ngx.exec by
-- one reference variable.
local config = require("sluice.config")
local context = require("sluice.context")
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
local probes = require("sluice.probes")
local metrics = require("sluice.metrics")
local trace = require("sluice.trace")
local strict = require("sluice.strict")
local relay = require("sluice.relay")
local breaker_defaults = require("sluice.breaker").settings(nil)
local rand = require("openssl.rand")

local ngx = ngx
local ngx_var = ngx.var
local ngx_header = ngx.header
local ngx_log = ngx.log
local ngx_print = ngx.print
local ngx_flush = ngx.flush
local ngx_exit = ngx.exit
local ngx_exec = ngx.exec
local HTTP_OK = ngx.HTTP_OK
local ERR = ngx.ERR
local re_find = ngx.re.find
local tonumber = tonumber
local str_format = string.format
local str_byte = string.byte
local str_gsub = string.gsub

local REQUEST_ID = [[^[A-Za-z0-9._:-]{1,128}\z]]

local _M = {}

-- Request ids made here: 32 hex digits, 16 random ones drawn when the worker starts
-- and a 16-digit sequence number of the worker. Unique like nginx's $request_id (16
-- random bytes per request), which costs ~1.5 us of RAND_bytes per request; these
-- are not secrets, only unique.
local id_prefix
local id_seq = 0

local function hex_byte(c)
    return str_format("%02x", str_byte(c))
end

local function new_request_id()
    if not id_prefix then   -- init_worker draws it; this only guards the order
        id_prefix = str_gsub(rand.bytes(8), ".", hex_byte)
    end
    id_seq = id_seq + 1
    return id_prefix .. str_format("%016x", id_seq)
end

-- LuaJIT's trace limits: a request's path through these modules makes long traces,
-- which the defaults abort ("trace too long") and leave to the interpreter for good.
-- Raised as APISIX and Kong do; measured with bench/instructions.py (bench/README.md).
local JIT_OPTIONS = { "maxtrace=8000", "maxrecord=32000", "maxmcode=65536", "maxside=400",
                      "maxsnap=2000", "minstitch=3", "maxirconst=2000" }

function _M.init(opts)
    require("jit.opt").start(unpack(JIT_OPTIONS))
    internal.init(opts.token)
    pii.configure(opts.log_excerpts)
    require("sluice.redis_limits").configure(opts.redis)   -- cluster mode, when set
    usage.init()
    upstream_tls.init()   -- which backend CA locations this config has
    -- Loads lkg/snapshot.json when the shared dict is empty (fresh start); after
    -- `nginx -s reload` the dict still holds the served snapshot and wins.
    config.init()
end

function _M.init_worker()
    -- a fresh draw per worker (after fork), so no two workers share a prefix
    id_prefix = str_gsub(rand.bytes(8), ".", hex_byte)
    routes.init_worker()
    metrics.init_worker()   -- the flush timer of this worker's metric buffer
    context.init_worker()   -- the gauge of request contexts held
    trace.init_worker()     -- seeds this worker's trace and span ids
end

-- Keep a valid incoming X-Request-Id, else a new one; sets ctx.request_id and
-- $sluice_request_id (which proxy_set_header and the log line read).
local function request_id(ctx)
    local id = ctx.request_id
    if id then
        return id
    end
    id = ngx_var.http_x_request_id
    if not id or not re_find(id, REQUEST_ID, "jo") then
        id = new_request_id()
    end
    ctx.request_id = id
    ngx_var.sluice_request_id = id
    return id
end

-- Send a ready answer (catalog, cache hit) and end the request.
local function answer(content_type, body)
    ngx.status = 200
    ngx_header["Content-Type"] = content_type
    ngx_print(body)
    return ngx_exit(200)
end

-- Hand the request to `backend` of `pool` for model `model_name`: convert the body
-- to the backend's protocol and set what proxy_pass reads. Shared by access and the
-- fallback location. Returns nil; or status, type, message.
local function forward(ctx, endpoint, doc, model_name, pool, backend)
    local path, status, err_type, msg = convert.prepare(ctx, endpoint, doc, model_name, pool)
    if not path then
        return status, err_type, msg
    end
    local args = ngx_var.args
    if args and args ~= "" then
        path = path .. "?" .. args
    end
    -- FIXME: a retry (balancer) reuses this Host; it picks only backends with the
    -- same base_path and credentials, so the URI and Authorization still fit.
    ngx_var.sluice_upstream_host = backend.host_header
    -- unset, the variable reads "" (no header sent): written only when there is a
    -- credential, or one of an earlier pass (the fallback's) to clear
    local credential = backend.auth_header
    if credential ~= "" or ctx.upstream_auth then
        ngx_var.sluice_upstream_auth = credential
        ctx.upstream_auth = credential ~= ""
    end
    ngx_var.sluice_upstream_uri = backend.base_path .. path
    -- a backend of another trust set: ngx.exec, unless the answer is relayed
    upstream_tls.forward(backend, relay.wanted(ctx))
end

-- Strict requests (lua/sluice/strict.lua): nil, or 400 naming the bad param (OpenAI's
-- error type for OpenAI callers, so their clients read it as OpenAI's own).
local function refuse_malformed(endpoint, doc, model)
    local param, why = strict.check(endpoint.name, doc, strict.limit(model))
    if not param then
        return nil
    end
    return 400, endpoint.caller == "openai" and "invalid_request_error" or "invalid_request",
           why, { param = param }
end

-- The access steps of a public request, in order. Each returns what it computed, or
-- a status and error; nothing here ends the request. Returns nil when the request
-- goes to a backend; a status, type, message[, extra] to refuse it; or 200 and the
-- content type and body of an answer made here (catalog, cache hit).
local function admit(ctx)
    local endpoint, path_model, err_type, msg, allow = endpoints.match()
    if not endpoint then
        local status = path_model   -- on failure: nil, status, type, message[, allow]
        if status == 405 then
            ngx_header["Allow"] = allow
        end
        return status, err_type, msg
    end

    local snap = config.get()
    if not snap then
        return 503, "backend_unavailable", "the gateway has no configuration yet",
               { retry_after = 1 }
    end

    -- on success: consumer, attributes; on failure: nil, status, type, message
    local consumer, status
    consumer, status, err_type, msg = jobs.authenticate(snap)   -- or a job's worker
    if not consumer then
        return status, err_type, msg
    end
    -- what routing conditions test: the consumer's attributes, JWT claims over them
    ctx.attributes = status
    ctx.consumer = consumer
    if endpoint.jobs then   -- /v1/jobs, /v1/files, /v1/batches: to the jobs service
        return jobs.serve(snap, consumer)
    end

    if endpoint.method == "GET" then
        return catalog.serve(snap, consumer, path_model)
    end

    local model_name, doc
    model_name, doc, err_type, msg = router.model_name(ctx, endpoint, path_model, snap)
    if not model_name then
        return doc, err_type, msg
    end

    -- a model, or a route over models (sluice.routes picks one below)
    if not snap.models[model_name] and not snap.routes[model_name] then
        return 404, "not_found", "unknown model " .. model_name
    end
    ctx.model_name = model_name
    if not auth.allowed(consumer, model_name) then
        return 403, "forbidden", "this key may not use model " .. model_name
    end
    -- the protocol's fields, typed and in range (a route's limit: its choice's, below)
    local extra
    status, err_type, msg, extra = refuse_malformed(endpoint, doc, snap.models[model_name])
    if status then
        return status, err_type, msg, extra
    end
    if jobs.wanted() then   -- Prefer: respond-async: stored and queued as a job
        return jobs.submit(snap, consumer, model_name)
    end

    status, err_type, msg, extra = policy.check(ctx, snap, consumer, model_name,
                                                endpoint.caller == "openai")
    if status then
        return status, err_type, msg, extra
    end
    usage.count(ctx, endpoint, consumer, model_name)

    local violated = content.check(snap, model_name, ctx.request_doc)
    if violated then
        observe.policy_refused(model_name, violated)
        return 451, "policy_violation",
               "the request was refused by content policy " .. violated
    end

    local asked = model_name
    model_name = routes.choose(ctx, snap, endpoint, model_name, consumer)

    local pool, model
    pool, model, err_type, msg = router.pool(snap, endpoint, model_name)
    if not pool then
        return model, err_type, msg
    end
    if model_name ~= asked then
        status, err_type, msg, extra = refuse_malformed(endpoint, doc, model)
        if status then
            return status, err_type, msg, extra
        end
    end
    ctx.model_name = model_name

    local hit_type, hit = cache.lookup(ctx, endpoint, doc, model, consumer)
    if hit_type then
        return 200, hit_type, hit
    end
    status, err_type, msg, extra = admission.admit(ctx, snap, consumer, model_name, pool)
    if status then
        -- Saturated. A job's run is retried by the worker later, and a best-effort
        -- request of a plan with buffer_at_peak becomes a job now (as with Prefer:
        -- respond-async); either way the plan counts it when it runs, so what
        -- policy.check and usage.count took goes back (quotas count answers once).
        if status == 503 then
            local buffer = not ctx.job_id and admission.buffers(snap, consumer)
            if buffer or ctx.job_id then
                policy.undo(ctx)
                usage.uncount(ctx)
            end
            if buffer then
                routes.unchoose(ctx, endpoint, asked)
                ctx.model_name = asked
                return jobs.submit(snap, consumer, asked)
            end
        end
        return status, err_type, msg, extra
    end

    local backend, retry_after = balancer.choose(ctx, pool, snap.breaker)
    if not backend then
        -- every backend loading: 503 "model loading"
        status, err_type, msg, extra = health.refuse(pool, model_name)
        if status then
            return status, err_type, msg, extra
        end
        if retry_after then
            return 503, "backend_unavailable", "every backend of model "
                   .. model_name .. " has an open circuit",
                   { retry_after = retry_after > 0 and retry_after or 1 }
        end
        return 503, "backend_unavailable",
               "no backend of model " .. model_name .. " is available"
    end
    ctx.model = model
    doc, msg = pii.forward(model, doc)   -- the fallback, if any, gets the masked body too
    if msg then
        return 500, "internal_error", "the request could not be masked"
    end
    fallback.arm(ctx, model)   -- before forward() rewrites the body
    return forward(ctx, endpoint, doc, model_name, pool, backend)
end

local function joined(first, second)
    if not first then
        return second
    end
    if not second then
        return first
    end
    return first .. ", " .. second
end

-- A relayed stream whose first frame converted: 200, then each piece as it comes.
local function send_stream(ctx)
    relay.stream_headers(ctx)
    ngx.send_headers()
    local piece = relay.next_piece(ctx)
    while piece do
        ngx_print(piece)
        ngx_flush(true)
        piece = relay.next_piece(ctx)
    end
    relay.finish_stream(ctx)
    return ngx_exit(HTTP_OK)
end

-- A converted answer, fetched through the subrequest (sluice.relay): sent with its
-- own status, or a 502 when its conversion (a stream's first frame) failed.
local function send_relayed(ctx)
    if ctx.fallback then
        -- the first pass's attempts (its subrequest's, or proxied from here) come
        -- first in the log line and the breakers' bookkeeping (sets
        -- ctx.upstream_earlier; note_upstream joins the fallback's to them)
        ctx.upstream_earlier = {
            joined(ctx.upstream_status, ngx_var.upstream_status),
            joined(ctx.upstream_times, ngx_var.upstream_response_time),
            joined(ctx.upstream_header_times, ngx_var.upstream_header_time),
        }
    end
    ctx.relay_status = nil
    local res
    if relay.streams(ctx) then
        if relay.open_stream(ctx) == "ok" then
            return send_stream(ctx)
        end
        res = relay.finish_stream(ctx)   -- an error answer, or the first frame failed
    else
        res = relay.fetch(ctx)
    end
    local intercepted = relay.intercepted(ctx, res)
    if intercepted then
        -- nginx ended the subrequest before any error page: the public request's
        -- error page makes the answer (a 504 may go to the fallback from there)
        return ngx_exit(intercepted)
    end
    relay.copy_headers(res)
    local status, err_type, msg = relay.refusal(ctx, res)
    if status then
        return errors.exit(status, err_type, msg)
    end
    ngx.status = res.status
    ngx_print(res.body)
    return ngx_exit(HTTP_OK)
end

function _M.access()
    local ctx = ngx.ctx
    context.stash(ctx)
    request_id(ctx)
    trace.start(ctx)
    local status, err_type, msg, extra = admit(ctx)
    if status == 200 then
        return answer(err_type, msg)
    elseif status == 499 then   -- the caller went away while it waited for a slot
        return ngx_exit(499)
    elseif status then
        return errors.exit(status, err_type, msg, extra)
    end
    if relay.wanted(ctx) then
        return send_relayed(ctx)
    end
end

-- location /_sluice/buffered (rewrite phase): the subrequest of a relayed answer.
function _M.buffered()
    if not relay.restore_vars(ngx.ctx) then
        return ngx_exit(404)
    end
end

-- The last upstream attempt's status and times, for the log phase of the public
-- request, read where a subrequest (sluice.relay) ends: the public request's own
-- $upstream_* are empty then (sets ctx.upstream_status, ctx.upstream_times,
-- ctx.upstream_header_times; after ctx.upstream_earlier, a relayed fallback's).
local function note_upstream(ctx)
    local e = ctx.upstream_earlier or {}
    ctx.upstream_status = joined(e[1], ngx_var.upstream_status)
    ctx.upstream_times = joined(e[2], ngx_var.upstream_response_time)
    ctx.upstream_header_times = joined(e[3], ngx_var.upstream_header_time)
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
    local ctx = ngx.ctx
    local id = ctx.request_id
    if id then
        ngx_header["X-Request-Id"] = id
    end
    if ctx.relayed and not ngx.is_subrequest then
        return   -- the subrequest's filters made this answer
    end
    if ctx.relay_vars and ngx.is_subrequest then
        -- what the backend (or nginx) answered, before the filters change it
        ctx.relay_status = ngx.status
        note_upstream(ctx)
    end
    policy.headers(ctx)
    convert.header_filter(ctx)
    cache.header_filter(ctx)
    routes.header(ctx, ngx_header)
    fallback.header_filter(ctx)
    if ctx.relay_queue and ngx.is_subrequest then
        relay.note_headers(ctx)   -- a relayed stream's, for the public request
    end
end

-- Conversion first: token accounting then reads the answer the caller gets, in
-- OpenAI's shape where the caller speaks OpenAI.
function _M.body_filter()
    local ctx = ngx.ctx
    if ctx.relayed and not ngx.is_subrequest then
        return
    end
    convert.body_filter(ctx)
    cache.body_filter(ctx)
    policy.body_filter(ctx)
    if ctx.relay_vars and ngx.is_subrequest then
        if ngx.arg[2] then
            note_upstream(ctx)
        end
        if ctx.relay_queue then
            relay.hand_over(ctx)   -- a relayed stream's piece, to the public request
        end
    end
end

function _M.log()
    local ctx = context.finish()
    policy.release(ctx)   -- quota bookkeeping first: the next request may be waiting
    admission.release(ctx)
    usage.log(ctx)
    -- a relayed answer's attempts were the subrequest's; a fallback after it went
    -- from this request: both, in order, as nginx lists several attempts (a relayed
    -- fallback's ctx.upstream_* hold them all already)
    local own = not ctx.upstream_earlier
    local times = own and joined(ctx.upstream_times, ngx_var.upstream_response_time)
                  or ctx.upstream_times
    observe.log(ctx, times)
    local ids = ctx.tried_ids
    if ids then
        balancer.log(ids, own and joined(ctx.upstream_status, ngx_var.upstream_status)
                          or ctx.upstream_status,
                     times, ctx.breaker_cfg or breaker_defaults)
    end
end

-- @sluice_fallback: a model's fallback after its backend timed out.
function _M.fallback()
    local ctx = context.restore()
    local endpoint, doc, pool, backend = fallback.route(ctx)
    if endpoint then
        local status, _, msg = forward(ctx, endpoint, doc, ctx.fallback, pool, backend)
        if not status then
            fallback.sent(ctx)
            -- a converted answer: its status after the conversion, as in access
            if relay.wanted(ctx) then
                return send_relayed(ctx)
            end
            return
        end
        doc = "cannot take this request: " .. msg
    end
    local status, err_type, msg
    status, err_type, msg = fallback.give_up(ctx, doc)
    return errors.exit(status, err_type, msg)
end

-- @sluice_tls_*: an https backend's own trust set (lua/sluice/upstream_tls.lua).
function _M.tls_resume()
    context.resume()
end

-- /healthz and /readyz (lua/sluice/probes.lua), with a request id like any answer.
function _M.probe(which)
    request_id(ngx.ctx)
    return probes[which]()
end

function _M.internal()
    request_id(ngx.ctx)
    return internal.handle()
end

-- Did the last upstream attempt answer with an HTTP status (as opposed to nginx
-- failing to connect or timing out)? $upstream_header_time is "-" without headers.
local function backend_answered(ctx)
    -- this request's own attempts (a fallback's), else a relayed subrequest's
    local times = ngx_var.upstream_header_time or ctx.upstream_header_times
    if not times then
        return false
    end
    local last = times:match("([^,%s:]+)%s*$")
    return last ~= nil and tonumber(last) ~= nil
end

-- Named location behind `error_page`: nginx's own 413/494/500/502/503/504 leave in
-- the error template (a backend's own errors are converted by sluice.convert; a
-- relayed backend 504 comes here only to reach the fallback).
function _M.error_page()
    local ctx = context.restore()
    request_id(ctx)
    trace.start(ctx)   -- nginx's own 413/494 never reached access
    local status = ngx.status
    if fallback.try(ctx, status) then   -- a 504 with a fallback model goes there
        return ngx_exec(fallback.LOCATION)
    end
    policy.failed(ctx)
    local err_type, msg
    -- no answer from an https backend: was it the handshake? (reads nginx's log;
    -- an answer first, so an older line about this connection cannot be taken)
    local tls_failure = status == 502 and not backend_answered(ctx)
                        and upstream_tls.handshake_failure()
    if tls_failure then
        -- the backend got no request: its certificate or ours was refused
        err_type, msg = "backend_tls_error", "backend TLS handshake failed: " .. tls_failure
        upstream_tls.count_failure(ctx.model_name or "", observe.backend_name(ctx))
    elseif status == 413 then
        err_type, msg = "payload_too_large", "request body is larger than this gateway accepts"
    elseif status == 494 or status == 400 then
        -- only 494 is routed here; nginx shows it as 400 by the time we run
        status, err_type, msg = 400, "invalid_request", "request headers are too large"
    elseif not errors.MESSAGES[status] then
        ngx_log(ERR, "unexpected status ", status, " in error page")
        status = 500
    end
    errors.send(status, err_type, msg)
end

return _M
