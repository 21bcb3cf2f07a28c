-- The access steps of a public request, in order (admit), and the hand-over to a
-- backend that the fallback location shares (forward). Each step returns a failure
-- status-first (status, type, message, extra), then what it computed: nothing here
-- ends a request; sluice/phases.lua
-- does, with what these return.
local config = require("sluice.config")
local auth = require("sluice.auth")
local endpoints = require("sluice.endpoints")
local target = require("sluice.target")
local convert = require("sluice.convert")
local cache = require("sluice.cache")
local catalog = require("sluice.catalog")
local balancer = require("sluice.balancer")
local observe = require("sluice.observe")
local policy = require("sluice.policy")
local content = require("sluice.content")
local splits = require("sluice.splits")
local fallback = require("sluice.fallback")
local health = require("sluice.health")
local admission = require("sluice.admission")
local usage = require("sluice.usage")
local pii = require("sluice.pii")
local phi = require("sluice.phi")
local jobs = require("sluice.jobs")
local upstream_tls = require("sluice.upstream_tls")
local strict = require("sluice.strict")
local carry = require("sluice.carry")
local stored = require("sluice.stored")
local relay = require("sluice.relay")
local delivery = require("sluice.delivery")
local anthropic = require("sluice.adapters.anthropic")
local shape = require("sluice.shape")
local media = require("sluice.media")
local media_usage = require("sluice.media_usage")
local media_caps = require("sluice.media_caps")
local ip_limit = require("sluice.ip_limit")

local ngx = ngx
local ngx_var = ngx.var
local req_set_uri = ngx.req.set_uri

local _M = {}

-- Hand the request to `backend` of `pool` for model `model_name`: convert the body
-- to the backend's protocol, decide how the answer travels (ctx.delivery: direct,
-- tls, relay or stream; sluice.delivery) and set what proxy_pass reads. Shared by
-- access and the fallback location. Returns nil (phases.lua delivers); or status,
-- type, message.
function _M.forward(ctx, endpoint, doc, model_name, pool, backend)
    local status, err_type, msg, extra, path = convert.prepare(ctx, endpoint, doc, model_name,
                                                              pool)
    if status then
        return status, err_type, msg, extra
    end
    -- FIXME: a retry (balancer) reuses this Host; it picks only backends with the
    -- same base_path and credentials, so the URI and Authorization still fit.
    ngx_var.sl_host = backend.host_header
    -- unset, the variable reads "" (no header sent): written only when there is a
    -- credential, or one of an earlier pass (the fallback's) to clear
    local credential = backend.auth_header
    local held = ctx.backend
    if credential ~= "" or held.upstream_auth then
        ngx_var.sluice_upstream_auth = credential
        held.upstream_auth = credential ~= ""
    end
    -- location / proxies without variables (proxy_pass http://sluice_backend: nothing
    -- to evaluate or parse per request): the caller's own URI as it came, or this one
    -- set as the request's URI. A relay's subrequest, @sluice_fallback and the TLS
    -- locations proxy to $sluice_upstream_uri.
    path = shape.apply(ctx, backend, path)   -- a hosted vendor's headers, path and query
    local uri = backend.base_path .. path
    local fb = ctx.fallback   -- a second pass (@sluice_fallback) proxies the variable
    if delivery.decide(ctx, backend) ~= delivery.DIRECT or fb.taken or fb.retry then
        ngx_var.sluice_upstream_uri = uri
    elseif uri ~= ctx.req.plain_path then
        req_set_uri(uri)
    end
    upstream_tls.set_vars(ctx, backend)
end

-- After jobs.serve or jobs.submit: their refusal, or on to the jobs service.
local function to_jobs(ctx, status, err_type, msg)
    if status then
        return status, err_type, msg
    end
    delivery.job(ctx)
    return nil
end

-- Strict requests (lua/sluice/strict.lua), and what the model's backends cannot
-- carry (lua/sluice/carry.lua): nil, or 400 naming the bad param (OpenAI's error type
-- for OpenAI callers, so their clients read it as OpenAI's own). Audio and images:
-- does the model do that work, does the body fit it (sluice.media)?
local function refuse_malformed(endpoint, doc, model, len)
    local status, err_type, msg, extra = media.check(endpoint, model, len)
    if status then
        return status, err_type, msg, extra
    end
    local param, why = strict.check(endpoint.name, doc, strict.limit(model))
    if not param then
        param, why = carry.check_model(endpoint, doc, model)
    end
    if not param then
        return nil
    end
    return 400, endpoint.caller == "openai" and "invalid_request_error" or "invalid_request",
           why, { param = param }
end

-- A kept response (GET, DELETE /v1/responses/{id}, …/input_items, …/cancel): through a
-- backend of the model that keeps it (sluice.stored), unchanged. Counted by the
-- consumer's plan as any request of that model (rate, concurrency, request quotas; not
-- the token quota: nothing is generated), once a backend is there to take it: a 503
-- for none counts nothing.
function _M.read_stored(ctx, snap, consumer, endpoint)
    local status, err_type, msg, extra, model_name = stored.model(snap, consumer)
    if status then
        return status, err_type, msg, extra
    end
    local aim = ctx.target
    aim.model_name = model_name
    local model = snap.models[model_name]
    local pool = model.pools[endpoint.native]
    local backend = balancer.choose(ctx, pool, snap.breaker)
    if not backend then
        return 503, "backend_unavailable", "no backend of model " .. model_name
               .. " is available"
    end
    status, err_type, msg, extra = policy.check(ctx, snap, consumer, model_name, false)
    if status then
        return status, err_type, msg, extra
    end
    aim.model = model
    return _M.forward(ctx, endpoint, nil, model_name, pool, backend)
end

-- The access steps of a public request, in order. Each step returns a failure
-- status-first, in the same slots (status, type, message, extra), and what it
-- computed after them; nothing here ends the request. Returns nil when the request
-- leaves as ctx.delivery says (sluice.delivery: to a backend, the jobs service, or
-- the HTTP/1.1 loop); a status, type, message[, extra] to refuse it; or 200 and the
-- content type and body of an answer made here (catalog, cache hit).
function _M.admit(ctx)
    local status, err_type, msg, extra, endpoint, path_model = endpoints.match(ctx)
    if status then
        return status, err_type, msg, extra
    end

    local snap, moved = config.get()
    local aim = ctx.target
    aim.moved = moved
    if not snap then
        return 503, "backend_unavailable", "the gateway has no configuration yet",
               { retry_after = 1 }
    end
    local per_ip = snap.ip_limit   -- before the key lookup: bad keys cost a token too
    local address   -- the caller's, read once for this limit and the plan's
    if per_ip then
        address = ip_limit.address(per_ip)
        status, err_type, msg, extra = ip_limit.check(per_ip, address)
        if status then
            return status, err_type, msg, extra
        end
    end

    local consumer, attributes   -- (or a job's worker, on a consumer's behalf)
    status, err_type, msg, extra, consumer, attributes = jobs.authenticate(snap, ctx)
    if status then
        return status, err_type, msg, extra
    end
    -- what routing conditions test: the consumer's attributes, JWT claims over them
    local caller = ctx.caller
    caller.attributes = attributes
    caller.consumer = consumer
    local plan = consumer.plan_id and snap.plans[consumer.plan_id]
    if plan and plan.per_ip and not caller.job_id then   -- the plan's rate_per_ip
        status, err_type, msg, extra = ip_limit.check_plan(consumer.plan_id, plan.per_ip,
                                                           address or ip_limit.address(per_ip))
        if status then
            return status, err_type, msg, extra
        end
    end
    if endpoint.jobs then   -- /v1/jobs, /v1/files, /v1/batches: to the jobs service
        return to_jobs(ctx, jobs.serve(snap, consumer))
    end

    if endpoint.stored then   -- /v1/responses/{id}[/…]: a kept response
        return _M.read_stored(ctx, snap, consumer, endpoint)
    end
    if endpoint.method == "GET" then
        return catalog.serve(snap, consumer, path_model)
    end

    local model_name, doc
    status, err_type, msg, extra, model_name, doc = target.model_name(ctx, endpoint, path_model, snap)
    if status then
        return status, err_type, msg, extra
    end

    -- a model, or a route over models (sluice.splits picks one below)
    if not snap.models[model_name] and not snap.routes[model_name] then
        return 404, "not_found", "unknown model " .. model_name
    end
    aim.model_name = model_name
    if relay.loops(snap, endpoint, model_name, doc) then
        delivery.loop(ctx)   -- nothing counted yet: the HTTP/1.1 pass counts it
        return nil
    end
    if not auth.allowed(consumer, model_name) then
        return 403, "forbidden", "this key may not use model " .. model_name
    end
    -- the protocol's fields, typed and in range (a route's limit: its choice's, below)
    status, err_type, msg, extra = refuse_malformed(endpoint, doc, snap.models[model_name],
                                                  ctx.body.len)
    if status then
        return status, err_type, msg, extra
    end
    if endpoint.answered then   -- /v1/messages/count_tokens: the gateway's estimate
        return 200, "application/json", anthropic.count_tokens(doc)
    end
    if jobs.wanted(ctx) then   -- Prefer: respond-async: stored and queued as a job
        return to_jobs(ctx, jobs.submit(snap, consumer, model_name))
    end

    status, err_type, msg, extra = policy.check(ctx, snap, consumer, model_name,
                                                endpoint.caller == "openai" or endpoint.llm)
    if status then
        return status, err_type, msg, extra
    end
    media_usage.note(ctx, endpoint, doc)   -- audio seconds, characters, images
    status, err_type, msg, extra = media_caps.reserve(ctx, snap, consumer, model_name)
    if status then
        policy.undo(ctx)   -- refused by a cap: the plan's other limits go back
        return status, err_type, msg, extra
    end
    usage.count(ctx, endpoint, consumer, model_name)

    local violated = content.check(snap, model_name, ctx.body.doc)
    if violated then
        observe.policy_refused(model_name, violated)
        return 451, "policy_violation",
               "the request was refused by content policy " .. violated
    end

    local asked = model_name
    model_name = splits.choose(ctx, snap, endpoint, model_name, consumer)

    local pool, model
    status, err_type, msg, extra, pool, model = target.pool(snap, endpoint, model_name)
    if status then
        return status, err_type, msg, extra
    end
    if model_name ~= asked then
        status, err_type, msg, extra = refuse_malformed(endpoint, doc, model, ctx.body.len)
        if status then
            return status, err_type, msg, extra
        end
    end
    aim.model_name = model_name

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
            local job_id = caller.job_id
            local buffer = not job_id and admission.buffers(snap, consumer)
            if buffer or job_id then
                policy.undo(ctx)
                usage.uncount(ctx)
            end
            if buffer then
                splits.unchoose(ctx, endpoint, asked)
                aim.model_name = asked
                return to_jobs(ctx, jobs.submit(snap, consumer, asked))
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
    aim.model = model
    doc, msg = pii.forward(model, doc)   -- the fallback, if any, gets the masked body too
    if msg then
        return 500, "internal_error", "the request could not be masked"
    end
    local phi_status, phi_type
    doc, phi_status, phi_type, msg = phi.request(ctx, model, doc)   -- nothing without a phi_policy
    if phi_status then
        return phi_status, phi_type, msg
    end
    fallback.arm(ctx, model, endpoint)   -- before forward() rewrites the body
    return _M.forward(ctx, endpoint, doc, model_name, pool, backend)
end

return _M
