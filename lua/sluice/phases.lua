-- Entry points: each *_by_lua_block in nginx/nginx.conf.tmpl is one call here, and
-- the only module that ends a request or sends a response: the access steps return
-- what they computed or a status and error. How an answer travels is one value,
-- ctx.delivery (sluice.delivery), decided by the steps; every ngx.exec and every
-- capture is made here (deliver), and the filters and the log branch on it.
-- Per-request state lives in ngx.ctx, the context described in sluice/context.lua,
-- carried across error_page and ngx.exec by one reference variable.
local config = require("sluice.config")
local context = require("sluice.context")
local errors = require("sluice.errors")
local convert = require("sluice.convert")
local cache = require("sluice.cache")
local balancer = require("sluice.balancer")
local internal = require("sluice.internal")
local observe = require("sluice.observe")
local policy = require("sluice.policy")
local splits = require("sluice.splits")
local fallback = require("sluice.fallback")
local admission = require("sluice.admission")
local usage = require("sluice.usage")
local pii = require("sluice.pii")
local phi = require("sluice.phi")
local upstream_tls = require("sluice.upstream_tls")
local probes = require("sluice.probes")
local metrics = require("sluice.metrics")
local trace = require("sluice.trace")
local relay = require("sluice.relay")
local delivery = require("sluice.delivery")
local steps = require("sluice.steps")
local headers = require("sluice.headers")
local realtime = require("sluice.realtime")
local realtime_pump = require("sluice.realtime_pump")
local fields = require("sluice.bytes").fields
local breaker_defaults = require("sluice.breaker").settings(nil)

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
local tonumber = tonumber

local DIRECT, RELAY, STREAM, LOOP = delivery.DIRECT, delivery.RELAY, delivery.STREAM,
                                    delivery.LOOP
local OWN, ASIDE = delivery.OWN, delivery.ASIDE
-- the deliveries whose filters do other than their own answer's work (delivery.role):
-- most answers are their own pass's, and need no call to say so
local OTHER = { [RELAY] = true, [STREAM] = true, [LOOP] = true }

local _M = {}

-- LuaJIT's trace limits: a request's path through these modules makes long traces,
-- which the defaults abort ("trace too long", "loop unroll limit reached": the log
-- phase's shared-dict calls) and, after a few aborts, leave to the interpreter for
-- good. Raised as APISIX and Kong do; measured with bench/instructions.py and
-- `jit.v` (bench/README.md).
local JIT_OPTIONS = { "maxtrace=8000", "maxrecord=32000", "maxmcode=65536", "maxside=400",
                      "maxsnap=2000", "minstitch=3", "maxirconst=2000", "loopunroll=60" }

function _M.init(opts)
    require("jit.opt").start(unpack(JIT_OPTIONS))
    require("sluice.ffi").init()   -- fails the start if a private FFI symbol is gone
    internal.init(opts.token)
    pii.configure(opts.log_excerpts)
    require("sluice.redis_limits").configure(opts.redis)   -- cluster mode, when set
    require("sluice.redis_caps").configure(opts.redis)     -- (the media caps too)
    usage.init()
    upstream_tls.init()   -- which backend CA locations this config has
    relay.configure(opts.http2)   -- no HTTPS listener: no request is HTTP/2
    -- Loads lkg/snapshot.json when the shared dict is empty (fresh start); after
    -- `nginx -s reload` the dict still holds the served snapshot and wins.
    config.init()
end

function _M.init_worker()
    splits.init_worker()
    metrics.init_worker()   -- the flush timer of this worker's metric buffer
    context.init_worker()   -- the gauge of request contexts held
    trace.init_worker()     -- fresh id prefixes per worker (after fork)
end

-- Send a ready answer (catalog, cache hit) and end the request.
local function answer(content_type, body)
    ngx.status = 200
    ngx_header["Content-Type"] = content_type
    ngx_print(body)
    return ngx_exit(200)
end

-- Did the last upstream attempt answer with an HTTP status (as opposed to nginx
-- failing to connect or timing out)? $upstream_header_time is "-" without headers.
local function backend_answered(ctx)
    -- this request's own attempts (a fallback's), else a relayed subrequest's
    local times = ngx_var.upstream_header_time or delivery.header_times(ctx)
    if not times then
        return false
    end
    local last = times:match("([^,%s:]+)%s*$")
    return last ~= nil and tonumber(last) ~= nil
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
local function send_relayed(ctx, how)
    local res
    if how == STREAM then
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
        delivery.made_here(ctx)
        return ngx_exit(intercepted)
    end
    relay.copy_headers(res)
    local status, err_type, msg = relay.refusal(ctx, res)
    if status then
        return errors.exit(status, err_type, msg)
    end
    local body
    body, status, err_type, msg = phi.answer(ctx, res.body)   -- as it is without a phi_policy
    if status then
        return errors.exit(status, err_type, msg)
    end
    ngx.status = res.status
    ngx_print(body)
    return ngx_exit(HTTP_OK)
end

-- The answer on its way, as ctx.delivery says: proxied by this location (direct),
-- fetched through the relay's subrequest (relay, stream), or to another location
-- (tls, loop, job, fallback).
local function deliver(ctx)
    local how = delivery.how(ctx)
    if how == DIRECT then
        return
    elseif how == RELAY or how == STREAM then
        return send_relayed(ctx, how)
    end
    return ngx_exec(ctx.delivery.where)
end

function _M.access()
    local ctx = context.new()
    headers.read(ctx)
    trace.start(ctx)   -- the request id, then the trace context
    local status, err_type, msg, extra = steps.admit(ctx)
    if status == 200 then
        return answer(err_type, msg)
    elseif status == 499 then   -- the caller went away while it waited for a slot
        return ngx_exit(499)
    elseif status == 413 then
        -- a body left unread (an upload refused early): nginx's own 413 answers, through
        -- the error page, and closes the connection, so that the rest of the body is
        -- never taken for a next request
        ctx.body.too_large = msg
        return ngx_exit(413)
    elseif status then
        return errors.exit(status, err_type, msg, extra)
    end
    return deliver(ctx)
end

-- location = /v1/realtime (content phase): admitted, the WebSocket session runs here
-- to its end (sluice.realtime_pump); refused, the error template before any upgrade.
function _M.realtime()
    local ctx = context.new()
    headers.read(ctx)
    trace.start(ctx)
    local status, err_type, msg, extra, protocol = realtime.admit(ctx)
    if status == 499 then   -- the caller went away while it waited for a slot
        return ngx_exit(499)
    elseif status then
        return errors.exit(status, err_type, msg, extra)
    end
    return realtime_pump.serve(ctx, protocol)
end

-- Its log phase: one line per session (or per refusal), metrics, usage.
function _M.realtime_log()
    local ctx = context.finish()
    realtime_pump.log(ctx)
    context.recycle(ctx)
end

-- location /_sluice/buffered (rewrite phase): the subrequest of a relayed answer.
function _M.buffered()
    if not relay.restore_vars(ngx.ctx) then
        return ngx_exit(404)
    end
end

function _M.balancer()
    local ctx = ngx.ctx
    balancer.balance(ctx, ctx.target.model)
    admission.attempt(ctx)
    if (ctx.backend.tries or 1) > 1 then
        observe.retried(ctx)
    end
end

-- (X-Request-Id: nginx's add_header, in nginx.conf.tmpl)
function _M.header_filter()
    local ctx = ngx.ctx
    local d = ctx.delivery
    local role = d and OTHER[d.how] and delivery.role(ctx) or OWN
    if role == ASIDE then
        return   -- the subrequest's filters, or the HTTP/1.1 pass, made this answer
    elseif role ~= OWN then
        -- a relay's subrequest: what the backend (or nginx) answered, before the
        -- filters change it, for the public request
        delivery.note_subrequest(ctx, true)
    end
    convert.header_filter(ctx)
    phi.header_filter(ctx)   -- a stream under a phi_policy only
    cache.header_filter(ctx)
    splits.header(ctx, ngx_header)
    fallback.header_filter(ctx)
    if role == STREAM then
        relay.note_headers(ctx)   -- a relayed stream's, for the public request
    end
end

-- Conversion first: token accounting then reads the answer the caller gets, in
-- OpenAI's shape where the caller speaks OpenAI.
function _M.body_filter()
    local ctx = ngx.ctx
    local d = ctx.delivery
    local role = d and OTHER[d.how] and delivery.role(ctx) or OWN
    if role == ASIDE then
        return
    end
    convert.body_filter(ctx)
    phi.body_filter(ctx)   -- a stream under a phi_policy only
    cache.body_filter(ctx)
    policy.body_filter(ctx)
    if role ~= OWN then   -- a relay's subrequest
        if ngx.arg[2] then
            delivery.note_subrequest(ctx)
        end
        if role == STREAM then
            relay.hand_over(ctx)   -- a relayed stream's piece, to the public request
        end
    end
end

function _M.log()
    local ctx = context.finish()
    if delivery.how(ctx) == LOOP and backend_answered(ctx) then
        return   -- the HTTP/1.1 pass answered: it counted and logged the request
    end
    policy.release(ctx)   -- quota bookkeeping first: the next request may be waiting
    admission.release(ctx)
    usage.log(ctx)
    -- $upstream_status, $upstream_response_time (nil: no backend tried), $bytes_sent,
    -- as one variable ($sl_logf, a map in nginx.conf.tmpl)
    local statuses, times, bytes_sent = fields(ngx_var.sl_logf)
    -- a relayed answer's attempts were the subrequest's; a fallback after it went
    -- from this request: all, in order, as nginx lists several attempts
    statuses, times = delivery.attempts(ctx, statuses, times)
    observe.log(ctx, times, bytes_sent)
    local held = ctx.backend
    local ids = held.tried_ids
    if ids then
        balancer.log(ids, statuses, times, held.breaker_cfg or breaker_defaults)
    end
    context.recycle(ctx)   -- nothing reads it after this
end

-- @sluice_fallback: a model's fallback after its backend timed out, or another
-- vendor of the model after one failed (sluice.fallback).
function _M.fallback()
    local ctx = context.restore()
    local endpoint, doc, pool, backend = fallback.route(ctx)
    if endpoint then
        local status, _, msg = steps.forward(ctx, endpoint, doc, ctx.fallback.taken
                                             or ctx.target.model_name, pool, backend)
        if not status then
            fallback.sent(ctx)
            return deliver(ctx)   -- from here (direct), its TLS location, or relayed
        end
        doc = "cannot take this request: " .. msg
    end
    local status, err_type, msg
    status, err_type, msg = fallback.give_up(ctx, doc)
    return errors.exit(status, err_type, msg)
end

-- @sluice_tls_*: an https backend's own trust set (lua/sluice/upstream_tls.lua);
-- @sluice_h1_loop: an HTTP/2 request served again as HTTP/1.1 (lua/sluice/relay.lua).
function _M.tls_resume()
    context.resume()
end

-- /healthz and /readyz (lua/sluice/probes.lua), with a request id like any answer.
function _M.probe(which)
    trace.request_id(ngx.ctx)
    return probes[which]()
end

function _M.internal()
    trace.request_id(ngx.ctx)
    return internal.handle()
end

-- Named location behind `error_page`: nginx's own 413/494/500/502/503/504 leave in
-- the error template (a backend's own errors are converted by sluice.convert; a
-- relayed backend 504 comes here only to reach the fallback).
function _M.error_page()
    local ctx = context.restore()
    trace.start(ctx)   -- ids: nginx's own 413/494 never reached access
    local status = ngx.status
    if fallback.try(ctx, status) then   -- a 504 with a fallback model goes there
        delivery.fallback(ctx)
        return deliver(ctx)
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
        upstream_tls.count_failure(ctx.target.model_name or "", observe.backend_name(ctx))
    elseif status == 413 then
        err_type, msg = "payload_too_large",
                        ctx.body.too_large or "request body is larger than this gateway accepts"
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
