-- TLS to https:// backends. What stock nginx 1.22 allows decides the shape:
-- proxy_ssl_name and proxy_ssl_certificate[_key] (data:$var) take variables, so
-- the name to verify (also sent as SNI) and the client pair are per request; but
-- proxy_ssl_verify and proxy_ssl_trusted_certificate are fixed per location, so each
-- trust set a backend may need is a location of its own:
--
--   "system"    @sluice_tls_system (the system store; always rendered: location /
--               proxies to plain backends only, without variables)
--   "noverify"  @sluice_tls_noverify       (always rendered)
--   "ca-<hex>"  @sluice_tls_ca-<hex>       one per distinct CA of the snapshot,
--               rendered by control_plane/runtime/backend_trust.py with its CA
--               file; a new CA needs a graceful reload, which only a new set of
--               CAs causes
--   and each with "_mtls": the same trust presenting the backend's client pair
--   (nginx 1.22 refuses an empty data: certificate, so it cannot be the default)
--
-- A backend of another trust set is reached by ngx.exec from the access phase
-- (sluice.delivery's "tls", performed by sluice.phases); the request's context
-- crosses it through the registry (sluice.context). An
-- answer converted whole goes through a subrequest (sluice.relay), which cannot
-- reach a named location: each of them has an internal twin with the same TLS
-- lines, location = /_sluice/buffered_tls/<trust>[_mtls], the subrequest's URI.
-- Plain and TLS connections never share a keep-alive pool:
-- https backends go through their own upstream block (sluice_backend_tls).
local metrics = require("sluice.metrics")

local ngx = ngx
local ngx_var = ngx.var
local ngx_log = ngx.log
local ngx_md5 = ngx.md5
local WARN = ngx.WARN
local io_open = io.open
local ngx_worker_pid = ngx.worker.pid
local str_find = string.find
local gmatch = string.gmatch
local tostring = tostring
local type = type
local pairs = pairs

-- $sluice_upstream_tls: "" (unset) for a plain backend, "1" for https; nginx.conf's
-- map turns it into $sluice_upstream_base (the scheme and upstream block)
local TLS = "1"
local LOCATION_PREFIX = "@sluice_tls_"
local BUFFERED_PREFIX = "/_sluice/buffered_tls/"
local TRUST_INDEX = "conf/backend_tls.trust"   -- one trust id per line (gateway.py)
local ERROR_LOG = "logs/error.log"              -- nginx.conf.tmpl's error_log
local LOG_TAIL = 16384                          -- bytes of it read on a TLS 502

local _M = {}

metrics.register("sluice_backend_tls_failures_total", "counter",
                 "Requests whose backend TLS handshake failed (nothing was sent to it).",
                 { "model", "backend" })

-- trust ids this nginx has a location for ("system" and "noverify" always)
local loaded = { system = true, noverify = true }
-- init phase (and on every reload): which CA locations the rendered config has.
function _M.init()
    local f = io_open(ngx.config.prefix() .. TRUST_INDEX, "rb")
    if not f then
        return
    end
    for line in f:lines() do
        if line ~= "" then loaded[line] = true end
    end
    f:close()
end

-- Snapshot compile: the backend's TLS view, or nil for http://. `id` is what must
-- match for a retry or a kept-alive connection to serve another backend.
function _M.compile(b)
    local t = b.tls
    if b.scheme ~= "https" or type(t) ~= "table" then
        return nil
    end
    local trust = t.trust or "system"
    -- every trust set's location is rendered by runtime/backend_trust.py; "system"
    -- without a client pair needs no twin for the subrequest (/_sluice/buffered
    -- verifies against the system store)
    local own = (trust ~= "system" or t.client_cert)
                and trust .. (t.client_cert and "_mtls" or "") or nil
    return {
        trust = trust,
        loaded = loaded[trust] == true,
        location = LOCATION_PREFIX .. (own or trust),
        buffered = own and BUFFERED_PREFIX .. own,   -- the subrequest's (sluice.relay)
        name = t.server_name,
        cert = t.client_cert or "",
        key = t.client_key or "",
        id = trust .. "|" .. t.server_name .. "|"
             .. (t.client_cert and ngx_md5(t.client_cert) or ""),
    }
end

-- Snapshot compile: warn about backends that share an address with different TLS
-- settings. nginx's keepalive cache matches connections by address only, so such
-- backends could be handed each other's connections (and client identity).
function _M.check_shared(backends_by_addr)
    for addr, list in pairs(backends_by_addr) do
        local first = list[1]
        for i = 2, #list do
            local ti, t1 = list[i].tls, first.tls
            if (ti and ti.id) ~= (t1 and t1.id) then
                ngx_log(WARN, "backends ", tostring(first.name), " and ", tostring(list[i].name),
                        " share ", addr, " with different TLS settings: kept-alive ",
                        "connections may serve either; give them distinct addresses")
            end
        end
    end
end

-- Access phase (after the upstream variables): TLS variables of backend `b` (sets
-- ngx.var, and ctx.backend.upstream_tls: $sluice_upstream_tls is set). Where the request
-- goes then (its trust location, or a relay's twin of it) is ctx.delivery's
-- (sluice.delivery), and phases.lua takes it there.
function _M.set_vars(ctx, b)
    local t = b.tls
    local held = ctx.backend
    if not t then
        -- unset reads "": plain; written only to clear an earlier pass's (fallback)
        if held.upstream_tls then
            ngx_var.sluice_upstream_tls = ""
            held.upstream_tls = false
        end
        return
    end
    ngx_var.sluice_upstream_tls = TLS
    held.upstream_tls = true
    ngx_var.sluice_tls_name = t.name
    if t.cert ~= "" then
        ngx_var.sluice_tls_cert = t.cert
        ngx_var.sluice_tls_key = t.key
    end
end

-- Error page: why the TLS handshake with the last https backend failed, or nil
-- when it did not fail there. nginx says why only in its error log: no variable
-- tells a refused certificate from a refused connection ($upstream_status 502,
-- $upstream_connect_time "-" and 0 bytes either way), and Debian's nginx lacks
-- lua_capture_error_log. So the tail of logs/error.log is read back (a small read,
-- on this error path only) for this worker's newest line about this connection.
-- A reason class comes out, never the certificate.
local function classify(msg)
    local verify = msg:match("upstream SSL certificate verify error: %(%d+:([^)]*)%)")
    if verify then
        return "certificate verify failed (" .. verify .. ")"
    end
    if str_find(msg, "upstream SSL certificate does not match", 1, true) then
        return "certificate name mismatch"
    end
    if str_find(msg, "SSL_", 1, true) then
        local alert = msg:match("alert ([%a ]+)")
        if alert then
            return "the backend refused the handshake (alert " .. alert:gsub("%s+$", "") .. ")"
        end
        if str_find(msg, "SSL_do_handshake() failed", 1, true) then
            return "handshake error"
        end
    end
    -- TLS 1.3: a backend refusing our client certificate does so after our side of
    -- the handshake ended; its alert may be lost to the reset that follows it
    if str_find(msg, "(104: Connection reset by peer) while connecting", 1, true) then
        return "the backend reset the connection in the TLS handshake"
    end
    return nil
end

local function newest_line(pid, conn)
    local f = io_open(ngx.config.prefix() .. ERROR_LOG, "rb")
    if not f then
        return nil
    end
    local size = f:seek("end")
    f:seek("set", size > LOG_TAIL and size - LOG_TAIL or 0)
    local tail = f:read("*a") or ""
    f:close()
    local mark = " " .. pid .. "#"
    local tag = ": *" .. conn .. " "
    local found
    for line in gmatch(tail, "[^\n]+") do
        -- this worker, this connection, nginx's own lines (not Lua's)
        if str_find(line, mark, 1, true) and str_find(line, tag, 1, true)
           and not str_find(line, "[lua]", 1, true) then
            found = line
        end
    end
    return found
end

function _M.handshake_failure()
    if ngx_var.sluice_upstream_tls ~= TLS then
        return nil
    end
    local line = newest_line(ngx_worker_pid(), ngx_var.connection)
    return line and classify(line) or nil
end

function _M.count_failure(model, backend)
    metrics.inc("sluice_backend_tls_failures_total", 1, model, backend)
end

return _M
