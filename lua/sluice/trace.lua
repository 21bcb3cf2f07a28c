-- W3C trace context (https://www.w3.org/TR/trace-context/): each public request is
-- one span. A valid incoming `traceparent` is continued (its trace id kept, its span
-- the parent), else a trace starts here; the backend gets ours as its parent
-- (proxy_set_header traceparent in nginx/nginx.conf.tmpl), `tracestate` passes
-- through untouched. The ids go to the access-log line, and the log shipper turns
-- that line into an OTLP span (control_plane/tracing.py): nothing here but ids.
--
-- Ids are from LuaJIT's math.random, seeded per worker from OpenSSL: unique, not
-- secret (a trace id is no credential).
local rand = require("openssl.rand")

local ngx = ngx
local ngx_var = ngx.var
local re_match = ngx.re.match
local random = math.random
local str_format = string.format
local str_byte = string.byte
local type = type

-- version, trace id, parent id, flags; version 00 has nothing after the flags, a
-- later version may (and ff is invalid)
local TRACEPARENT = [[^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\z]]
local ZERO_TRACE = "00000000000000000000000000000000"
local ZERO_SPAN = "0000000000000000"

local _M = {}

-- init_worker: a fresh seed per worker (after fork), so workers draw apart.
function _M.init_worker()
    local b = rand.bytes(4)
    local a, c, d, e = str_byte(b, 1, 4)
    math.randomseed(((a * 256 + c) * 256 + d) * 256 + e + ngx.worker.pid())
end

local function hex8()
    return str_format("%08x", random(0, 0xffffffff))
end

local function new_span()
    local s = hex8() .. hex8()
    if s == ZERO_SPAN then
        return "0000000000000001"
    end
    return s
end
_M.new_span = new_span

-- Parses a traceparent value. Returns trace id, parent span id, flags; or nil.
function _M.parse(value)
    if type(value) ~= "string" then
        return nil
    end
    local m = re_match(value, TRACEPARENT, "jo")
    if not m then
        return nil
    end
    local version = m[1]
    if version == "ff" or (version == "00" and m[5]) then
        return nil
    end
    if m[2] == ZERO_TRACE or m[3] == ZERO_SPAN then
        return nil
    end
    return m[2], m[3], m[4]
end

-- Access phase (and the error page of a request that never reached access): this
-- request's trace and span (sets ctx.trace_id, ctx.span_id and the
-- $sluice_trace_id, $sluice_span_id, $sluice_parent_span_id, $sluice_traceparent
-- variables).
function _M.start(ctx)
    if ctx.trace_id then
        return
    end
    local trace_id, parent, flags = _M.parse(ngx_var.http_traceparent)
    if not trace_id then
        trace_id, flags = hex8() .. hex8() .. hex8() .. hex8(), "01"
        if trace_id == ZERO_TRACE then
            trace_id = "00000000000000000000000000000001"
        end
    end
    local span = new_span()
    ctx.trace_id, ctx.span_id = trace_id, span
    ngx_var.sluice_trace_id = trace_id
    ngx_var.sluice_span_id = span
    if parent then
        ngx_var.sluice_parent_span_id = parent
    end
    ngx_var.sluice_traceparent = "00-" .. trace_id .. "-" .. span .. "-" .. flags
end

return _M
