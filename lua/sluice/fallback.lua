-- Per-model fallback on timeout: a model with `fallback_model` whose backend times
-- out (504: nginx's read timeout, or the backend's own 504) is answered by the
-- fallback model instead, converted to the caller's protocol, with
-- `X-Sluice-Fallback: <fallback model>`.
--
--   access (model A)  arm(): $sluice_fallback_to = B, $sluice_fallback_body = body
--   error_page 504    try(): $sluice_fallback = B, ngx.exec("@sluice_fallback")
--   @sluice_fallback  access(): route B with the saved body, proxy as usual
--   fallback's 504    the error template (one hop only, never a chain)
--
-- ngx.ctx does not survive error_page's redirect nor ngx.exec, so what the second
-- pass needs travels in nginx variables; a named location keeps them (a URI exec
-- would re-run the server's `set`s). Limits and quotas were charged in the first
-- pass and are not charged again: the slot and the token reservation stay held until
-- the log phase. Only before anything was sent: once a stream has started, nginx
-- cannot send an error page, so a stream that stalls is cut, never replaced.
local cjson = require("cjson.safe")
local config = require("sluice.config")
local errors = require("sluice.errors")
local endpoints = require("sluice.endpoints")
local router = require("sluice.router")
local balancer = require("sluice.balancer")
local convert = require("sluice.convert")
local observe = require("sluice.observe")
local metrics = require("sluice.metrics")
local upstream_tls = require("sluice.upstream_tls")

local ngx = ngx
local ngx_var = ngx.var
local ngx_req = ngx.req
local ngx_header = ngx.header
local ngx_exec = ngx.exec
local type = type

local HEADER = "X-Sluice-Fallback"
local LOCATION = "@sluice_fallback"

local _M = {}

metrics.register("sluice_fallbacks_total", "counter",
                 "Requests handed to the model's fallback after a backend timeout, by outcome.",
                 { "model", "fallback", "outcome" })

-- Access phase of model `model` (its backend is chosen, its body not yet converted).
-- Costs nothing for models without a fallback.
function _M.arm(model)
    local fb = model.fallback
    if fb then
        ngx_var.sluice_fallback_to = fb
        ngx_var.sluice_fallback_body = ngx_req.get_body_data()
    end
end

-- Error page: on a 504 of a request armed for a fallback, hand it over (does not
-- return). A request already on its fallback keeps the header, then the template.
function _M.try(status)
    local used = ngx_var.sluice_fallback
    if used and used ~= "" then
        ngx_header[HEADER] = used
        metrics.inc("sluice_fallbacks_total", 1, ngx_var.sluice_model, used, "failed")
        return
    end
    if status ~= 504 then
        return
    end
    local fb = ngx_var.sluice_fallback_to
    if not fb or fb == "" then
        return
    end
    ngx_var.sluice_fallback = fb
    return ngx_exec(LOCATION)
end

-- The fallback cannot even be tried: the caller gets the timeout it would have got.
local function give_up(name, why)
    ngx_header[HEADER] = name
    metrics.inc("sluice_fallbacks_total", 1, ngx_var.sluice_model, name, "unavailable")
    return errors.exit(504, "backend_timeout", "the backend of model " .. ngx_var.sluice_model
                       .. " timed out and its fallback " .. name .. " " .. why)
end

-- Access phase of @sluice_fallback: route the saved request to the fallback model.
function _M.access()
    -- error_page left the 504 in r->err_status, which would override the fallback's
    -- own status; setting ngx.status clears it (the backend's status then replaces it)
    ngx.status = 200
    local ctx = ngx.ctx
    local name = ngx_var.sluice_fallback
    local snap = config.get()
    local model = snap and snap.models[name]
    if not model then
        return give_up(name, "is not served")
    end
    local endpoint = endpoints.match()
    local doc = cjson.decode(ngx_var.sluice_fallback_body or "")
    if not endpoint or type(doc) ~= "table" then
        return give_up(name, "cannot take this request")
    end
    if not endpoint.model_in_path then
        doc.model = name
    end
    local pool = router.pool(snap, endpoint, name)
    local backend = pool and balancer.choose(ctx, pool, snap.breaker)
    if not backend then
        return give_up(name, "has no available backend")
    end
    local raw = cjson.encode(doc)
    ngx_req.set_body_data(raw)   -- the native case sends it as is; prepare() replaces it
    ctx.model = model
    ctx.fallback = name
    ctx.request_doc, ctx.request_len = doc, #raw
    -- tokens reserved in the first pass are settled from the fallback's usage
    local token_key = ngx_var.sluice_token_key
    ctx.usage_scan = token_key ~= nil and token_key ~= "" or nil
    observe.backend(backend)

    local path, _, _, msg = convert.prepare(ctx, endpoint, doc, name, pool)
    if not path then
        return give_up(name, "cannot take this request: " .. msg)
    end
    local args = ngx_var.args
    if args and args ~= "" then
        path = path .. "?" .. args
    end
    metrics.inc("sluice_fallbacks_total", 1, ngx_var.sluice_model, name, "sent")
    ngx_var.sluice_upstream_host = backend.host_header
    ngx_var.sluice_upstream_auth = backend.auth_header
    ngx_var.sluice_upstream_uri = backend.base_path .. path
    upstream_tls.forward(ctx, backend)   -- a backend of another trust set: ngx.exec
end

-- header_filter: name the model that answered.
function _M.header_filter(ctx)
    if ctx.fallback then
        ngx_header[HEADER] = ctx.fallback
    end
end

return _M
