-- The per-request context: ngx.ctx of a public-listener request, and the one place
-- that says what it carries. Each field has one writer (below); every other module
-- only reads it. Most fields sit in a group, a table of its owner's fields: req,
-- caller, target, body, backend, cache and fallback are made with the context (new());
-- delivery, quota, trace and usage on first use. Every group is kept, emptied, with a
-- recycled context (recycle()): no table per request. The table below is the source
-- of docs/contracts.md's "Per-request context" (`python -m
-- control_plane.reference_docs` writes it; keep its layout: a field, two spaces, its
-- writer, two spaces, what; a group's fields indented by two more; continued lines
-- indented further).
--
-- ngx.ctx does not survive an internal redirect (error_page, ngx.exec). As Kong
-- does, the access phase stashes the table in a worker-local registry, here under the
-- request's own address (which a redirect keeps; a relayed subrequest finds it by ONE
-- nginx variable, $sluice_ctx_ref); the redirected location (error page, fallback)
-- and the log phase put the same table back, and the log phase frees the entry. A
-- registry entry lives from access to log of one request; the worker that stashed
-- it is the worker that restores it (a request never changes worker). After its
-- log phase the table itself, emptied, serves a next request of the worker
-- (recycle): no context and no group is made and collected per request.
--
--  field                 writer          what
--  ------------------------------------------------------------------------------------------------------
--  ref                   context         registry number of this table (the request's address; a subrequest's
--                                        `$sluice_ctx_ref`)
--  request_id            trace           `X-Request-Id` kept or made (also `$sl_id`, which `proxy_set_header`
--                                        and the log line read)
--  trace                 trace           W3C trace context of the request, for the log line
--    .id, .span, .parent  trace  trace id (a trace started here: the request id made for it), this request's
--                                        span, the caller's span
--  req                   headers, endpoints  what the request line and headers say, read once
--    .rare_headers       headers         the request carries `X-Request-Id`, `traceparent`, `Prefer` or
--                                        `X-Sluice-Worker-Token` (one nginx map read instead of four header
--                                        reads)
--    .request_uri, .authorization  headers  `$request_uri` and the `Authorization` header (nil: none), read
--                                        with `rare_headers` in one walk over the header list
--    .uri                endpoints       `$uri` as access found it (the log line's path)
--    .plain_path         endpoints       the same string when the caller sent it unescaped (`$request_uri`'s
--                                        path is `$uri`; nil otherwise): location / then proxies the
--                                        request's own URI, with no URI variable
--  caller                steps, jobs     who asks
--    .consumer           steps           the authenticated consumer (snapshot table)
--    .attributes         steps           what routing conditions test (consumer attributes, JWT claims over
--                                        them)
--    .job_id             jobs            the job a worker's request runs (never made async again)
--  target                steps, splits   what the request goes to
--    .moved              steps           `sluice.moved`'s count read by `config.get` for this pass: the
--                                        weight and circuit caches look at their own generations only when it
--                                        moved
--    .model_name         steps           the model asked for, then a route's choice (metrics, log)
--    .model              steps (fallback: its model)  the chosen model (snapshot table)
--    .route, .route_version  splits      route that chose `model_name`, the version it chose
--  body                  target, pii, phi, phases  the request's body
--    .doc, .len          target (fallback: re-encoded)  decoded body (nil when no step reads it: a
--                                        path-named model forwarded unchanged), its length
--    .excerpt            pii             masked start of the body, when enabled
--    .phi                phi             personal data found in the request and its answer (a model or
--                                        consumer with a `phi_policy`): the compiled policy, hits by class,
--                                        the placeholders given, the log line's summary
--    .form               target          an upload's form as `sluice.upload` read it (its small fields, the
--                                        file part, the boundary); nil for a JSON body
--    .too_large          phases          the message of a 413 refused in access, for the error page
--                                        (nginx's own 413 closes the connection: the unread body is never
--                                        taken for a next request)
--  backend               balancer, admission, queue, steps, upstream_tls, shape  the backend and what the
--                                        request holds of it
--    .pool, .index, .breaker_cfg  balancer  the chosen backend: its pool, its index in `pool.backends`,
--                                        the snapshot's breaker settings
--    .tries, .tried      balancer        attempts in this pass; their indexes (made on a retry)
--    .tried_ids          balancer        backend ids tried, every pass (stats, breaker): `"3"` for one
--                                        attempt, `{"3", "7"}` for more
--    .inflight           admission       backend id whose in-flight count is held
--    .queue_slot, .queue_ms  queue       pool whose slot a waiter was handed (until the balancer counts it);
--                                        ms waited (log)
--    .upstream_auth      steps           `$sluice_upstream_auth` holds a backend credential (written only
--                                        then, or to clear one)
--    .upstream_tls       upstream_tls    `$sluice_upstream_tls` is set: the backend is https (written only
--                                        then, or to clear it)
--    .shape              shape           a vendor's headers or query string are on the request (written
--                                        only then, or once they are cleared)
--    .realtime           realtime        a `/v1/realtime` session: its caps, its backend and that WebSocket,
--                                        bytes and events each way, how it closed (`realtime_pump` writes
--                                        its fields once open); for these requests `realtime` writes
--                                        `caller`, `target.model_name`, `target.model`, `body.doc` and
--                                        `body.len` in `steps`' and `target`'s stead
--  cache                 cache           the response cache
--    .key, .ttl, .status  cache          this pass's entry key (nil: nothing to store), its ttl, its
--                                        `X-Cache-Status` (nil: not cacheable)
--    .len, .size, .parts  cache          the answer's Content-Length, the bytes kept so far, the pieces
--    .logged             cache           the last pass's status, for the log's `cache`
--  conv                  convert         conversion state of this pass (also set in header_filter for a
--                                        backend's own error answer on a native pair)
--  upstream_error        convert         start of a backend's own error body (log line)
--  delivery              delivery        how the answer travels, decided once per pass (`sluice.delivery`):
--                                        `phases.lua` performs every `ngx.exec` and capture, the filters and
--                                        the log branch on it
--    .how, .where        delivery        this pass's choice: `direct` (proxied by its own location), `tls`
--                                        (`@sluice_tls_*`), `relay` and `stream` (the subrequest
--                                        `/_sluice/buffered[_tls/…]`), `loop` (`@sluice_h1_loop`), `job`
--                                        (`@sluice_jobs`), `fallback` (`@sluice_fallback`); nil: an answer
--                                        made here
--    .upstream, .own     delivery        attempts this request's own `$upstream_*` do not show (a relayed
--                                        pass's subrequest's, and the request's own before a relayed
--                                        fallback), in order, for the log line, the breakers and the error
--                                        page; `own`: the request's own attempts are among them
--    .status             delivery        the subrequest's status before its filters
--    .vars, .queue       relay           the subrequest's proxying variables; a relayed stream's pieces,
--                                        their semaphore, the first frame's verdict, the subrequest's thread
--  fallback              fallback        a model's fallback after its backend timed out; another vendor
--                                        of a media model after one failed
--    .to, .body          fallback        armed model, saved body (also the upload a vendor conversion read:
--                                        `fallback.keep`)
--    .vendors            fallback        a media request of a model with several pools (vendors)
--    .ctype, .args       fallback        an upload's Content-Type and query string as they came
--    .retry, .status     fallback        the pool that failed and its status: the next pass goes to another
--    .taken              fallback        the fallback model the request went to
--  quota                 policy          what the request holds of its plan's limits
--    .slot               policy          concurrency key held (`false`: none or given back)
--    .daily, .monthly    policy          request-quota counters counted (`false`: given back by
--                                        `policy.undo`)
--  usage                 tokens          token accounting and usage counting
--    .scan               tokens          scan the answer for `usage` (`tokens.hold`; `tokens.scan` for
--                                        `sluice.usage`; `tokens.fallback`)
--    .key, .reserved     tokens          token reservation (`false`: settled)
--    .total, .prompt, .completion  tokens  what the answer reported (log line, usage counters)
--    .sse, .len, .n, .bytes, .parts, .carry, .done  tokens  body-filter scan state
--    .keys               usage           the request's usage counter keys
--    .media              media_usage     what audio and image work bills (audio seconds, characters,
--                                        images) and, on a plan with daily caps, what it holds of them
--                                        (`media_caps`)
--  error_type            errors          the error template's type (`errors.note` for a backend's own error,
--                                        from convert's body filter)
--
-- Per pass: `conv`, the cache's entry (all of `cache` but `logged`), `backend.tried`,
-- `backend.tries` and `target.moved` describe one trip to a backend; a restored
-- context starts a new pass without them (restore() clears them).
local metrics = require("sluice.metrics")
local new_tab = require("table.new")
local clear_tab = require("table.clear")
local get_request = require("sluice.ffi").get_request
local ffi_cast = require("ffi").cast

local ngx = ngx
local ngx_var = ngx.var
local ngx_log = ngx.log
local ERR = ngx.ERR
local tonumber = tonumber
local pairs = pairs
local tostring = tostring

local UINTPTR = "uintptr_t"
local GAUGE_EVERY = 1   -- seconds between updates of the held-contexts gauge
-- Hash slots a new context is made with: its 16 top-level fields above (grown from
-- ngx.ctx's 4, the table would be rehashed per request).
local FIELDS = 16
-- The groups made with a context, and their hash slots (the fields above).
local MADE = { req = 8, caller = 4, target = 8, body = 4, backend = 16, cache = 8,
               fallback = 4 }

local _M = {}

metrics.register("sluice_request_contexts", "gauge",
                 "Request contexts held in a worker's registry: requests between their "
                 .. "access and log phases (a number that only grows is a leak).",
                 { "worker" })

local registry = {}   -- ref -> ctx, per worker
-- Contexts of finished requests, emptied, for the next requests of this worker: a
-- 64-slot table made and collected per request was about half of what a request
-- gave LuaJIT's collector (bench/README.md, issue 13, session 7).
local SPARE_MAX = 64
local spare, n_spare = {}, 0

-- The groups new() makes, put into `ctx` where it lacks them; returns ctx.
local function furnish(ctx)
    for name, slots in pairs(MADE) do
        if not ctx[name] then
            ctx[name] = new_tab(0, slots)
        end
    end
    return ctx
end

-- The registry number of this request: its ngx_http_request_t's address, which an
-- internal redirect keeps (no variable to write per request). A subrequest has its
-- own address: it finds its public request's entry by $sluice_ctx_ref, which
-- sluice.relay sets for it.
local function request_ref()
    return tonumber(ffi_cast(UINTPTR, get_request()))
end

-- The registry number and context of this request (or of the public request of
-- this subrequest); nil when there is none.
local function find_saved()
    local ref = request_ref()
    local ctx = registry[ref]
    if ctx then
        return ref, ctx
    end
    ref = tonumber(ngx_var.sluice_ctx_ref)
    if ref then
        return ref, registry[ref]
    end
end

-- Access phase of the public location, first thing: the request's context, made
-- with room for its fields and findable after a redirect (sets ngx.ctx and ctx.ref;
-- nothing has written the context yet).
function _M.new()
    local ctx
    if n_spare > 0 then   -- emptied by recycle(): as new, its slots already made
        ctx = spare[n_spare]
        spare[n_spare] = nil
        n_spare = n_spare - 1
    else
        ctx = furnish(new_tab(0, FIELDS))
    end
    ngx.ctx = ctx
    local ref = request_ref()
    registry[ref] = ctx
    ctx.ref = ref
    return ctx
end

-- After an internal redirect (error page, fallback location): the request's context,
-- put back into ngx.ctx, without the per-pass fields. A request redirected before
-- access (nginx's own 413, 494) has none: its fresh ngx.ctx is returned, with the
-- groups new() makes (unregistered: not recycled).
function _M.restore()
    local ctx = ngx.ctx
    if ctx.ref then
        return ctx
    end
    local _, saved = find_saved()
    if not saved then
        return furnish(ctx)
    end
    saved.conv = nil
    local backend, cache = saved.backend, saved.cache
    backend.tried, backend.tries = nil, nil
    saved.target.moved = nil
    local logged = cache.logged
    clear_tab(cache)
    cache.logged = logged
    ngx.ctx = saved
    return saved
end

-- After ngx.exec to an https backend's trust location (lua/sluice/upstream_tls.lua):
-- the same pass goes on, so the context comes back whole (sets ngx.ctx).
function _M.resume()
    local _, saved = find_saved()
    if not saved then
        ngx_log(ERR, "TLS location reached without a request context")
        return ngx.exit(500)
    end
    ngx.ctx = saved
    return saved
end

-- Log phase: the request's context (restored if a redirect emptied ngx.ctx), and its
-- registry entry freed. A request that never reached access gets its fresh ngx.ctx
-- with the groups new() makes.
function _M.finish()
    local ctx = ngx.ctx
    local ref = ctx.ref
    if not ref then
        local saved
        ref, saved = find_saved()
        if not saved then
            return furnish(ctx)
        end
        ctx = saved
    end
    registry[ref] = nil
    return ctx
end

-- recycle(): `group` (nil: never made), emptied, back into ctx[name].
local function keep(ctx, name, group)
    if group then
        clear_tab(group)
        ctx[name] = group
    end
end

-- Log phase, last thing: the request's context, emptied, for a next request. Safe
-- here: the log phase is the request's last Lua; nginx frees the request right after
-- it, in the same call (its user threads, a relay's subrequest among them, are over
-- or killed unrun; no timer or module table keeps a context), and finish() has taken
-- it out of the registry. Only contexts new() made (ctx.ref): not the fresh ngx.ctx
-- of a request nginx refused before access.
function _M.recycle(ctx)
    if ctx.ref and n_spare < SPARE_MAX then
        -- the groups' own tables are kept, emptied, with it (one by one: a loop
        -- over their names would be a trace of its own, entered and left per request)
        local req, caller, target, body, backend = ctx.req, ctx.caller, ctx.target,
                                                   ctx.body, ctx.backend
        local cache, fallback, delivery = ctx.cache, ctx.fallback, ctx.delivery
        local trace, usage, quota = ctx.trace, ctx.usage, ctx.quota
        clear_tab(ctx)
        keep(ctx, "req", req)
        keep(ctx, "caller", caller)
        keep(ctx, "target", target)
        keep(ctx, "body", body)
        keep(ctx, "backend", backend)
        keep(ctx, "cache", cache)
        keep(ctx, "fallback", fallback)
        keep(ctx, "delivery", delivery)
        keep(ctx, "trace", trace)
        keep(ctx, "usage", usage)
        keep(ctx, "quota", quota)
        n_spare = n_spare + 1
        spare[n_spare] = ctx
    end
end

-- Entries held: requests of this worker between access and log; 0 when idle.
function _M.held()
    local n = 0
    for _ in pairs(registry) do
        n = n + 1
    end
    return n
end

-- init_worker: publish held() as a gauge, labelled with the worker id.
function _M.init_worker()
    local worker = tostring(ngx.worker.id() or 0)
    local ok, err = ngx.timer.every(GAUGE_EVERY, function()
        metrics.set("sluice_request_contexts", _M.held(), worker)
    end)
    if not ok then
        ngx_log(ERR, "context: no gauge timer: ", err)
    end
end

return _M
