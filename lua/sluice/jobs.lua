-- Async jobs in the gateway (docs/contracts.md, "Async jobs"). The gateway does no
-- job work: it authenticates the caller as usual, then the request goes (ngx.exec, by
-- sluice.phases: sluice.delivery's "job") to the named location @sluice_jobs
-- (nginx/delivery.conf.tmpl), which proxies to the jobs service with the gateway token,
-- under the URI set here; this module sets the caller's consumer id, priority class
-- and model as request headers, replacing any the caller sent.
--
--   Prefer: respond-async on an inference endpoint   -> /sluice-jobs/submit<uri>
--   GET|DELETE /v1/jobs/{id}                          -> /sluice-jobs<uri>
--   POST /v1/files, GET /v1/files/{id}[/content]      -> /sluice-jobs<uri>
--   POST /v1/batches, GET /v1/batches/{id}, POST /v1/batches/{id}/cancel
--
-- `sluice worker` sends each job back through a gateway on the consumer's behalf:
-- X-Sluice-Worker-Token (the gateway token) and X-Sluice-On-Behalf-Of (consumer id)
-- stand for the caller's key there, so every policy applies when the job runs.
local auth = require("sluice.auth")
local internal = require("sluice.internal")
local headers = require("sluice.headers")

local ngx = ngx
local ngx_var = ngx.var
local ngx_req = ngx.req
local re_find = ngx.re.find
local str_lower = string.lower
local type = type
local pairs = pairs
local tbl_concat = table.concat

local RANKS = { best_effort = 1, standard = 2, critical = 3 }
local NAMES = { "best_effort", "standard", "critical" }

-- Caller-facing paths: pattern, then the endpoint per method. A method that is not
-- listed gets the path's `allow` endpoint: its `method` is the Allow header's value,
-- which no request method equals (endpoints.match answers 405).
local function routes(allow, by_method)
    by_method.allow = { name = "jobs", jobs = true, method = allow }
    for m, e in pairs(by_method) do
        if m ~= "allow" then
            e.name, e.jobs, e.method = "jobs", true, m
        end
    end
    return by_method
end

local PATHS = {
    { [[^/v1/jobs/[A-Za-z0-9_-]{1,64}\z]], routes("GET, DELETE", { GET = {}, DELETE = {} }) },
    { [[^/v1/files\z]], routes("POST", { POST = {} }) },
    { [[^/v1/files/[A-Za-z0-9_-]{1,64}(/content)?\z]], routes("GET", { GET = {} }) },
    { [[^/v1/batches\z]], routes("POST", { POST = {} }) },
    { [[^/v1/batches/[A-Za-z0-9_-]{1,64}\z]], routes("GET", { GET = {} }) },
    { [[^/v1/batches/[A-Za-z0-9_-]{1,64}/cancel\z]], routes("POST", { POST = {} }) },
}

local _M = {}

-- The endpoint of a jobs, files or batches path (endpoints.match), or nil.
function _M.endpoint(uri, method)
    for i = 1, #PATHS do
        if re_find(uri, PATHS[i][1], "jo") then
            local by_method = PATHS[i][2]
            return by_method[method] or by_method.allow
        end
    end
    return nil
end

-- Access step: auth.authenticate(), or the worker's request on a consumer's behalf.
-- Returns status, type, message on failure; else nil, nil, nil, nil, the consumer
-- and its attributes. Sets
-- ctx.caller.job_id (its one writer) on a worker's request (such a request is never
-- made async again).
function _M.authenticate(snap, ctx)
    local given = headers.rare(ctx) and ngx_var.http_x_sluice_worker_token
    if not given or given == "" then
        -- auth's own convention: consumer, attributes; or nil, status, type, message
        local consumer, second, err_type, msg = auth.authenticate(snap, ctx.req.authorization)
        if not consumer then
            return second, err_type, msg
        end
        return nil, nil, nil, nil, consumer, second
    end
    -- never forwarded to a backend, whatever happens next
    ngx_req.clear_header("X-Sluice-Worker-Token")
    if not internal.is_token(given) then
        return 403, "forbidden", "invalid worker token"
    end
    local id = ngx_var.http_x_sluice_on_behalf_of
    local consumer = id and snap.consumers[id]
    if not consumer then
        return 403, "forbidden", "the job's consumer no longer exists"
    end
    ctx.caller.job_id = ngx_var.http_x_sluice_job_id or "?"
    return nil, nil, nil, nil, consumer, consumer.attributes
end

-- The caller's priority class, as sluice.admission ranks it: the plan's, or lower
-- by X-Sluice-Priority when the plan allows it.
local function class_of(snap, consumer)
    local p = consumer.plan_id and snap.priorities and snap.priorities[consumer.plan_id]
    if not p then
        return "standard"
    end
    local rank = p.rank
    local h = p.header and ngx_var.http_x_sluice_priority
    if h then
        local asked = RANKS[str_lower(h)]
        if not asked then
            return nil
        end
        if asked < rank then
            rank = asked
        end
    end
    return NAMES[rank]
end

local function hand_over(uri, snap, consumer, model_name)
    local class = class_of(snap, consumer)
    if not class then
        return 400, "invalid_request",
               "X-Sluice-Priority must be critical, standard or best_effort"
    end
    ngx_req.set_header("X-Sluice-Consumer-Id", consumer.key_id)
    ngx_req.set_header("X-Sluice-Priority-Class", class)
    ngx_req.set_header("X-Sluice-Model", model_name)   -- nil clears a caller's own
    ngx_req.clear_header("X-Sluice-Gateway-Token")      -- set by the location only
    ngx_req.set_uri(uri, false)   -- the query string stays
    return nil
end

-- Access phase, a jobs/files/batches endpoint, after authentication: the request
-- made ready for the service (nil), or status, type, message to refuse it.
function _M.serve(snap, consumer)
    return hand_over("/sluice-jobs" .. ngx_var.uri, snap, consumer, nil)
end

-- Did the caller ask for an async answer (and is this not a worker running a job)?
function _M.wanted(ctx)
    local prefer = headers.rare(ctx) and ngx_var.http_prefer
    if not prefer or ctx.caller.job_id then
        return false
    end
    if type(prefer) == "table" then   -- several Prefer headers
        prefer = tbl_concat(prefer, ",")
    end
    return re_find(prefer, [[(^|[,;\s])respond-async\s*($|[,;])]], "joi") ~= nil
end

-- Access phase, an inference request with Prefer: respond-async, once the caller may
-- use the model: made ready for the service, as a job (nil), or status, type,
-- message to refuse it. Quotas and policy apply when it runs.
function _M.submit(snap, consumer, model_name)
    return hand_over("/sluice-jobs/submit" .. ngx_var.uri, snap, consumer, model_name)
end

return _M
