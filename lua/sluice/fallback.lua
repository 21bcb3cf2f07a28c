-- Per-model fallback on timeout: a model with `fallback_model` whose backend times
-- out (504: nginx's read timeout; or the backend's own 504 on a relayed answer,
-- sluice/relay.lua, as nginx intercepts no backend answer) is answered by the
-- fallback model instead, converted to the caller's protocol, with
-- `X-Sluice-Fallback: <fallback model>`.
--
--   access (model A)  arm(): ctx.fallback.to = B, ctx.fallback.body = body
--   error_page 504    try(): ctx.fallback.taken = B; ctx.delivery "fallback": phases
--                     ngx.exec("@sluice_fallback")
--   @sluice_fallback  route(): B with the saved body; phases forward() it as usual
--   fallback's 504    the error template (one hop only, never a chain)
--
-- Audio and image work of a model served by several vendors (pools: sluice.spread)
-- goes the same way to another vendor first, on nginx's own 502, 503 or 504 (the
-- vendor could not be reached or timed out): the caller's request as it came (an
-- upload from nginx's buffer or temporary file, or from the copy the first pass's
-- conversion read: keep()) is converted again for that vendor; its failure may then
-- go to the fallback model.
--
--   access            arm(): ctx.fallback.vendors = true (several pools)
--   error_page        try(): ctx.fallback.retry = the pool that failed
--   @sluice_fallback  route(): another pool of the same model
--
-- The request's context survives error_page and ngx.exec (sluice/context.lua), so the
-- second pass finds what the first armed. Limits and quotas were charged in the first
-- pass and are not charged again: the slot and the token reservation stay held until
-- the log phase. Only before anything was sent: once a stream has started, nginx
-- cannot send an error page, so a stream that stalls is cut, never replaced.
local cjson = require("cjson.safe")
local config = require("sluice.config")
local endpoints = require("sluice.endpoints")
local target = require("sluice.target")
local balancer = require("sluice.balancer")
local metrics = require("sluice.metrics")
local tokens = require("sluice.tokens")
local spread = require("sluice.spread")

local ngx = ngx
local ngx_req = ngx.req
local ngx_header = ngx.header
local ngx_var = ngx.var
local type = type
local pairs = pairs
local select = select

local HEADER = "X-Sluice-Fallback"
local NONE = {}

local _M = {}

metrics.register("sluice_fallbacks_total", "counter",
                 "Requests handed to the model's fallback after a backend timeout, by outcome.",
                 { "model", "fallback", "outcome" })

-- Access phase of model `model` at `endpoint` (its backend is chosen, its body not
-- yet converted): sets ctx.fallback.to, .vendors, .body and (an upload) .ctype,
-- .args. Costs nothing without a fallback or several vendors.
function _M.arm(ctx, model, endpoint)
    local fb = model.fallback
    local vendors = endpoint.task ~= nil and model.pool_order[2] ~= nil
    if fb or vendors then
        local armed = ctx.fallback
        armed.to = fb
        armed.vendors = vendors or nil
        armed.body = ngx_req.get_body_data()   -- nil: in nginx's temporary file
        if endpoint.upload then   -- what a vendor's conversion replaces
            armed.ctype, armed.args = ngx_var.http_content_type, ngx_var.args
        end
    end
end

-- Access phase, a vendor conversion (sluice.media_convert) that read the upload
-- whole from nginx's temporary file, which its body replaces: `raw` is kept for a
-- second pass (sets ctx.fallback.body).
function _M.keep(ctx, raw)
    local armed = ctx.fallback
    if (armed.to or armed.vendors) and not armed.body then
        armed.body = raw
    end
end

-- Error page: true when a 504 of a request armed for a fallback should go to
-- @sluice_fallback (sluice.delivery's "fallback": phases redirects it); sets
-- ctx.fallback.taken then. A request already on its fallback keeps the
-- header, then the template.
function _M.try(ctx, status)
    local armed = ctx.fallback
    local used = armed.taken
    if used then
        ngx_header[HEADER] = used
        metrics.inc("sluice_fallbacks_total", 1, ctx.target.model_name, used, "failed")
        return false
    end
    if armed.vendors and not armed.retry and (status == 502 or status == 503
                                               or status == 504) then
        armed.retry, armed.status = ctx.backend.pool, status   -- another vendor first
        return true
    end
    local fb = armed.to
    if status ~= 504 or not fb then
        return false
    end
    armed.taken = fb
    return true
end

-- The fallback cannot even be tried: the caller gets the timeout it would have got.
-- Returns the status, type and message of the error template.
function _M.give_up(ctx, why)
    local name, model_name = ctx.fallback.taken, ctx.target.model_name
    if not name then   -- another vendor of the model (a retry)
        local status = ctx.fallback.status
        return status, status == 504 and "backend_timeout" or "backend_error",
               "the backend of model " .. model_name .. " failed (" .. status
               .. ") and the model " .. why
    end
    ngx_header[HEADER] = name
    metrics.inc("sluice_fallbacks_total", 1, model_name, name, "unavailable")
    return 504, "backend_timeout", "the backend of model " .. model_name
           .. " timed out and its fallback " .. name .. " " .. why
end

-- route() of an upload: its form goes on as it came, from memory (saved by arm() or
-- keep()) or from nginx's temporary file when the first pass sent it unchanged; its
-- Content-Type and query string as they came. Its `model` field still names the
-- first model. `pool`: the other vendor's (nil: the fallback model's).
local function upload_route(ctx, snap, endpoint, name, model, pool)
    local armed = ctx.fallback
    local saved = armed.body
    if saved then
        ngx_req.set_body_data(saved)
    end
    ngx_req.set_header("Content-Type", armed.ctype)
    ngx_var.args = armed.args
    pool = pool or select(5, target.pool(snap, endpoint, name))
    local backend = pool and balancer.choose(ctx, pool, snap.breaker)
    if not backend then
        return nil, "has no available backend"
    end
    ctx.target.model = model
    return endpoint, nil, pool, backend
end

-- Access phase of @sluice_fallback: route the saved request to the fallback model
-- (sets ctx.target.model, ctx.body.doc/len; tokens.fallback: the second pass's scan).
-- Returns endpoint, body (decoded), pool, backend; or nil and why not.
function _M.route(ctx)
    -- error_page left the 504 in r->err_status, which would override the fallback's
    -- own status; setting ngx.status clears it (the backend's status then replaces it)
    ngx.status = 200
    local armed = ctx.fallback
    local name = armed.taken
    local vendor   -- another vendor of the same model (a retry), not the fallback model
    if not name then
        name = ctx.target.model_name
    end
    -- the headers a vendor's mapping put on the last pass's request are not the next's
    local last = ctx.backend.pool
    local mapping = last and last.protocol == "vendor" and last.mapping
    for k in pairs(mapping and mapping.headers or NONE) do
        ngx_req.clear_header(k)
    end
    local snap = config.get()
    local model = snap and snap.models[name]
    if not model then
        return nil, "is not served"
    end
    local endpoint = select(5, endpoints.match(ctx))
    if not armed.taken then
        vendor = endpoint and spread.other(model, endpoint, armed.retry)
        if not vendor then
            return nil, "has no other vendor"
        end
    end
    if endpoint and endpoint.upload then   -- audio, image edits: sluice.upload
        return upload_route(ctx, snap, endpoint, name, model, vendor)
    end
    local doc = cjson.decode(armed.body or "")
    if not endpoint or type(doc) ~= "table" then
        return nil, "cannot take this request"
    end
    if not endpoint.model_in_path then
        doc.model = name
    end
    local pool = vendor or select(5, target.pool(snap, endpoint, name))
    local backend = pool and balancer.choose(ctx, pool, snap.breaker)
    if not backend then
        return nil, "has no available backend"
    end
    local raw = cjson.encode(doc)
    ngx_req.set_body_data(raw)   -- the native case sends it as is; prepare() replaces it
    ctx.target.model = model
    local body = ctx.body
    body.doc, body.len = doc, #raw
    -- tokens reserved in the first pass are settled from the fallback's usage
    tokens.fallback(ctx)
    return endpoint, doc, pool, backend
end

-- Access phase of @sluice_fallback, once forwarded.
function _M.sent(ctx)
    if not ctx.fallback.taken then
        return   -- another vendor of the same model
    end
    metrics.inc("sluice_fallbacks_total", 1, ctx.target.model_name, ctx.fallback.taken,
                "sent")
end

-- header_filter: name the model that answered. (A probe's plain ngx.ctx has no
-- ctx.fallback.)
function _M.header_filter(ctx)
    local armed = ctx.fallback
    local taken = armed and armed.taken
    if taken then
        ngx_header[HEADER] = taken
    end
end

return _M
