-- A request's ids, all made here: its request id and its W3C trace context.
--
-- Request id: X-Request-Id as the caller sent it when it is a sane token, else one
-- made here (ctx.request_id and $sl_id, which proxy_set_header and the log line
-- read).
--
-- Trace context (https://www.w3.org/TR/trace-context/): each public request is one
-- span. A valid incoming `traceparent` is continued (its trace id kept, its span the
-- parent), else a trace starts here; the backend gets ours as its parent
-- (proxy_set_header traceparent in nginx/nginx.conf.tmpl), `tracestate` passes
-- through untouched. The ids go to the access-log line, and the log shipper turns
-- that line into an OTLP span (control_plane/clients/tracing.py): nothing here but ids.
--
-- Ids made here: 32 hex digits, 16 random ones drawn when the worker starts and a
-- 16-digit sequence number of the worker. Unique like nginx's $request_id (16 random
-- bytes per request), which costs ~1.5 us of RAND_bytes per request; these are not
-- secrets, only unique. A trace started here has the request id made for it as its
-- id, or, when the caller named the request, one made the same way (its own random
-- digits); a span id is 8 random hex digits of the worker and 8 of the sequence.
-- One string.format each.
local rand = require("openssl.rand")
local headers = require("sluice.headers")
local new_tab = require("table.new")

local ngx = ngx
local ngx_var = ngx.var
local re_find = ngx.re.find
local re_match = ngx.re.match
local str_format = string.format
local str_gsub = string.gsub
local str_byte = string.byte
local type = type

local REQUEST_ID = [[^[A-Za-z0-9._:-]{1,128}\z]]
-- version, trace id, parent id, flags; version 00 has nothing after the flags, a
-- later version may (and ff is invalid)
local TRACEPARENT = [[^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\z]]
local ZERO_TRACE = "00000000000000000000000000000000"
local ZERO_SPAN = "0000000000000000"
local SPAN_WRAP = 4294967296

local _M = {}

local id_prefix, trace_prefix, span_prefix
local id_seq, seq = 0, 0

local function hex_byte(c)
    return str_format("%02x", str_byte(c))
end

-- init_worker: fresh random prefixes per worker (after fork), so workers draw apart;
-- never all zeros (a span id of zeros is invalid).
function _M.init_worker()
    id_prefix = str_gsub(rand.bytes(8), ".", hex_byte)
    trace_prefix = str_gsub(rand.bytes(8), ".", hex_byte)
    span_prefix = str_gsub(rand.bytes(4), ".", hex_byte)
    if span_prefix == "00000000" then
        span_prefix = "00000001"
    end
end

local function new_request_id()
    if not id_prefix then   -- init_worker draws it; this only guards the order
        _M.init_worker()
    end
    id_seq = id_seq + 1
    return str_format("%s%016x", id_prefix, id_seq)   -- one string made, not two
end

local function next_span()
    if not trace_prefix then   -- init_worker draws them; this only guards the order
        _M.init_worker()
    end
    seq = seq + 1
    return str_format("%s%08x", span_prefix, seq % SPAN_WRAP)   -- one string, not two
end

-- A new trace id, for a request whose id the caller gave.
local function new_trace()
    return str_format("%s%016x", trace_prefix, seq)
end

-- Keep a valid incoming X-Request-Id, else a new one; sets ctx.request_id and $sl_id
-- (which proxy_set_header and the log line read). Returns the id, and true when it
-- was made here.
function _M.request_id(ctx)
    local id = ctx.request_id
    if id then
        return id
    end
    local made
    id = headers.rare(ctx) and ngx_var.http_x_request_id
    if not id or not re_find(id, REQUEST_ID, "jo") then
        id = new_request_id()
        made = true
    end
    ctx.request_id = id
    ngx_var.sl_id = id
    return id, made
end

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

-- Access phase (and the error page of a request that never reached access): the
-- request id (request_id()), then this request's trace and span: sets ctx.trace
-- ({ id, span, parent } for the log line; a table kept with the context) and $sl_tp,
-- which proxy_set_header sends.
function _M.start(ctx)
    local id, made = _M.request_id(ctx)
    local t = ctx.trace
    if t then
        if t.id then
            return
        end
    else
        t = new_tab(0, 3)
        ctx.trace = t
    end
    local trace_id, parent, flags = _M.parse(headers.rare(ctx) and ngx_var.http_traceparent)
    local span = next_span()
    if not trace_id then
        trace_id = made and id or new_trace()
        flags = "01"
    end
    t.id, t.span, t.parent = trace_id, span, parent
    ngx_var.sl_tp = "00-" .. trace_id .. "-" .. span .. "-" .. flags
end

return _M
