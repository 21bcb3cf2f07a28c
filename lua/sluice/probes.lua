-- Probes for orchestrators (a kubelet, a load balancer) on the public listener; no
-- auth, and nothing in the answers an outsider could use:
--   GET /healthz   200 {"status": "ok"} while nginx answers (liveness)
--   GET /readyz    200 {"status": "ready"} once this gateway serves a snapshot (pushed
--                  or its last-known-good file), else 503 in the error template
local config = require("sluice.config")
local errors = require("sluice.errors")

local ngx = ngx
local ngx_req = ngx.req

local _M = {}

local function only_get()
    local method = ngx_req.get_method()
    if method ~= "GET" and method ~= "HEAD" then
        ngx.header["Allow"] = "GET, HEAD"
        return errors.exit(405, "method_not_allowed", ngx.var.uri .. " accepts GET")
    end
end

function _M.healthz()
    only_get()
    return errors.json(200, { status = "ok" })
end

function _M.readyz()
    only_get()
    if config.status().version > 0 then
        return errors.json(200, { status = "ready" })
    end
    return errors.exit(503, "not_ready", "this gateway has no snapshot yet")
end

return _M
