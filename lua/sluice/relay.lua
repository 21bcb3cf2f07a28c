-- Converted answers, sent with the status that fits them.
--
-- nginx sends a response's status and headers as soon as the backend's arrive, before
-- the body filter has read a byte of the body; a converted answer is read whole
-- (lua/sluice/convert.lua), so a backend 200 whose body cannot be converted would
-- reach the caller as an error body under status 200. For these answers the public
-- request proxies through a subrequest instead (ngx.location.capture to location
-- /_sluice/buffered, sharing the request's context): the subrequest does exactly
-- what location / does (balancer, retries, error page, fallback, conversion, cache,
-- token accounting) and the public request then sends its answer, or a 502 in the
-- error template when the conversion failed or the answer was cut short.
--
-- A stream converted frame by frame (a kserve_v2 backend's) goes through the same
-- subrequest, started in a light thread: its filters hand each converted piece to
-- the public request (ctx.delivery.queue) instead of the capture, and the public
-- request holds its status and headers until the first frame is converted or has
-- failed. Converted: 200 and the stream, piece by piece as it comes; a later
-- failure is an SSE error event in OpenAI's stream shape, then [DONE]. Failed: a
-- 502 in the error template, sent once the subrequest is over (nginx cannot cut a
-- subrequest short without ending the caller's request too, so the backend's
-- stream is read to its end or its timeout first).
--
-- An https backend with its own trust set is reached through the internal twin of
-- its TLS location (/_sluice/buffered_tls/..., sluice.upstream_tls). A model's
-- fallback (@sluice_fallback) relays its answer the same way.
--
-- Not over HTTP/2: ngx.location.capture refuses its requests (lua-nginx-module: "http2
-- requests not supported yet"). Such a request goes, before anything is counted, to
-- @sluice_h1_loop (loops()), which hands it whole to the same server's HTTP/1.1 unix
-- socket: there it is served like any HTTP/1.1 request, relay included, and counted
-- and logged once; the HTTP/2 pass only proxies the answer.
--
-- Cost: a subrequest per converted answer (bench/relay.py measures it), and a whole
-- answer held in memory once more (at most 16 MiB, as before); a stream's pieces
-- cross over as they come. Nothing on a pair proxied unchanged, unless its model has
-- a fallback.
local errors = require("sluice.errors")
local versions = require("sluice.versions")

local ngx = ngx
local ngx_var = ngx.var
local ngx_header = ngx.header
local ngx_log = ngx.log
local ERR = ngx.ERR
local capture = ngx.location.capture
local http_version = ngx.req.http_version
local spawn = ngx.thread.spawn
local wait_thread = ngx.thread.wait
local semaphore = require("ngx.semaphore")
local pairs = pairs
local str_lower = string.lower

local LOCATION = "/_sluice/buffered"
local HTTP_POST = ngx.HTTP_POST
local WAIT_S = 60   -- one wait for a stream's next piece (the backend timeout ends it)

-- What proxy_pass and proxy_set_header read, set in the access phase: the server's
-- `set`s run again at the start of a subrequest and would empty them.
local VARS = { "sluice_ctx_ref", "sl_id", "sl_host",
               "sluice_upstream_uri", "sluice_upstream_auth", "sluice_upstream_tls",
               "sluice_tls_name", "sluice_tls_cert", "sluice_tls_key",
               "sl_tp" }
-- the subrequest's framing, not the answer's
local HOP = { ["content-length"] = true, ["transfer-encoding"] = true,
              connection = true, ["keep-alive"] = true }

local _M = { LOCATION = LOCATION }

-- Does this gateway serve HTTP/2 at all (an HTTPS listener: nginx_tls.py)? Without
-- one no request is HTTP/2, and ngx.req.http_version (a C call LuaJIT stops its
-- trace at, not FFI) is not asked per request.
local serves_http2 = true

-- init_by_lua (phases.init): whether a listener speaks HTTP/2.
function _M.configure(http2)
    serves_http2 = http2 ~= false
end

-- Is this request HTTP/2?
local function http2()
    return serves_http2 and http_version() >= 2
end

-- Access phase, the request bound for a backend: is its answer converted (whole,
-- or frame by frame: see streams()), and can a subrequest fetch it (not HTTP/2)?
function _M.wanted(ctx)
    if ctx.conv == nil then
        -- proxied unchanged: only when its model has a fallback (nginx intercepts no
        -- backend answer, so only the relay sees a backend's own 504 before it is
        -- sent, and falls back on it: intercepted()); never a stream, which the
        -- relay would read whole; or a phi_policy scanned the request (sluice.phi
        -- scans the whole answer before it is sent)
        local doc = ctx.body.doc
        if (ctx.fallback.to == nil and ctx.body.phi == nil) or (doc and doc.stream == true) then
            return false
        end
    end
    return not http2()
end

-- Would the compiled model `m` need the relay for `req` ({ endpoint, streaming })?
-- It converts, or has a fallback or a phi_policy (sluice.phi scans the answer) and
-- the request is no stream.
local function relayed_for(m, req)
    return m ~= nil and (not m.pools[req.endpoint.native]
                         or ((m.fallback ~= nil or m.phi ~= nil) and not req.streaming))
end

-- Access phase, before anything is counted: an HTTP/2 request that the relay may
-- have to read first goes to @sluice_h1_loop, to be served again as HTTP/1.1 (a
-- subrequest cannot serve HTTP/2).
function _M.loops(snap, endpoint, name, doc)
    if not http2() then
        return false
    end
    local req = { endpoint = endpoint, streaming = doc ~= nil and doc.stream == true }
    return versions.any(snap, name, relayed_for, req)
end

-- Access phase: is it a stream converted frame by frame?
function _M.streams(ctx)
    local conv = ctx.conv
    return conv ~= nil and conv.frames
end

-- Access phase: the answer, through the subrequest to ctx.delivery.where (the
-- chosen backend's own trust location, or location /'s twin; sets
-- ctx.delivery.vars). Returns the capture's result.
function _M.fetch(ctx)
    local d = ctx.delivery
    -- $sluice_ctx_ref: the subrequest's way to its context (sluice.context)
    local saved = { ctx.ref }
    for i = 2, #VARS do
        saved[i] = ngx_var[VARS[i]] or ""
    end
    d.vars = saved
    -- the caller's query string, which proxy_pass appends ($is_args$args)
    return capture(d.where, { method = HTTP_POST, always_forward_body = true,
                              args = ngx_var.args, ctx = ctx })
end

-- The subrequest's rewrite phase: the proxying variables back. Returns false when
-- there is no public request behind it.
function _M.restore_vars(ctx)
    local d = ctx.delivery
    local saved = d and d.vars
    if not saved then
        return false
    end
    for i = 1, #VARS do
        ngx_var[VARS[i]] = saved[i]
    end
    return true
end

-- The answer's headers onto the public request's (not the subrequest's framing).
function _M.copy_headers(res)
    for k, v in pairs(res.header) do
        if not HOP[str_lower(k)] then
            ngx_header[k] = v
        end
    end
end

-- The statuses error_page takes (nginx/nginx.conf.tmpl): a subrequest that ends with
-- one of them comes back truncated and empty, its error page never run.
local INTERCEPTED = { [413] = true, [500] = true, [502] = true, [503] = true, [504] = true }

-- The status to end the public request with, so that its own error page answers
-- (as it would have without the subrequest); or nil. A backend's own 504 comes
-- back converted (nginx intercepts no backend answer), but a model with a fallback
-- falls back on it as on nginx's timeout: the error page does that, and the log
-- line keeps the backend's words (ctx.upstream_error).
function _M.intercepted(ctx, res)
    local status = ctx.delivery.status
    if not status then
        return nil
    end
    if (res.truncated and INTERCEPTED[status] and (res.body or "") == "")
       or (status == 504 and ctx.fallback.to and not ctx.fallback.taken) then
        errors.note(ctx, nil)   -- the converted 504 is dropped, and its type with it
        return status
    end
    return nil
end

-- nil when the captured answer goes out as it is; else status, type, message of
-- the error template that goes instead.
function _M.refusal(ctx, res)
    if res.truncated then
        return 502, "backend_error", "the backend's answer was cut short"
    end
    local conv = ctx.conv
    if conv and conv.failed then
        return 502, "backend_error", "cannot convert the backend answer: " .. conv.failed
    end
    if not res.status or res.status < 100 then
        return 502, "backend_error", "the backend failed to answer"
    end
    return nil
end

-- Access phase, a stream: the subrequest, in a light thread (sets ctx.delivery.queue;
-- the thread sets its .res once it is over). Waits for the first frame's fate:
-- returns "ok" (converted), "failed" (conv.failed says why), or nil when the
-- subrequest ended without a stream (an error answer: finish_stream()).
function _M.open_stream(ctx)
    local q = { sema = semaphore.new(), n = 0, taken = 0 }
    ctx.delivery.queue = q
    q.thread = spawn(function()
        -- whatever happens, the public request must not wait forever
        local ok, res = pcall(_M.fetch, ctx)
        if not ok then
            ngx_log(ERR, "relayed stream failed: ", res)
            res = { truncated = true, body = "", header = {} }
        end
        q.res = res
        q.sema:post(1)
    end)
    while not q.verdict and not q.res do
        q.sema:wait(WAIT_S)
    end
    return q.verdict
end

-- Subrequest header filter of a stream, after every filter: the status and headers
-- the public request sends when the first frame converted.
function _M.note_headers(ctx)
    local q = ctx.delivery.queue
    q.status, q.header = ngx.status, ngx.resp.get_headers()
end

-- Subrequest body filter of a stream, after every filter: what they made of this
-- piece goes to the public request, not to the capture. An error answer (conv.error)
-- is left to the capture.
function _M.hand_over(ctx)
    local q, conv = ctx.delivery.queue, ctx.conv
    if not conv or not conv.frames or conv.error then
        return
    end
    local data = ngx.arg[1]
    if data ~= "" then
        q.n = q.n + 1
        q[q.n] = data
        ngx.arg[1] = ""
    end
    if not q.verdict then
        -- a role chunk alone says nothing yet: wait for a frame, a failure or the end
        if conv.texts[1] then
            q.verdict = "ok"
        elseif conv.failed then
            q.verdict = "failed"
        elseif ngx.arg[2] then
            q.verdict = "ok"   -- a stream with no frame: an empty answer, not an error
        end
    end
    if q.verdict then
        q.sema:post(1)
    end
end

-- Access phase, a stream that converted: the status and headers to send.
function _M.stream_headers(ctx)
    local q = ctx.delivery.queue
    ngx.status = q.status
    _M.copy_headers(q)
end

-- Access phase, a stream that converted: its next piece, waiting for it; nil once
-- the subrequest is over and every piece was taken.
function _M.next_piece(ctx)
    local q = ctx.delivery.queue
    while true do
        local i = q.taken + 1
        local piece = q[i]
        if piece then
            q[i] = nil
            q.taken = i
            return piece
        end
        if q.res then
            return nil
        end
        q.sema:wait(WAIT_S)
    end
end

-- Access phase: the stream's subrequest is over (waits for it); returns its result,
-- as fetch() does.
function _M.finish_stream(ctx)
    local q = ctx.delivery.queue
    wait_thread(q.thread)
    return q.res
end

return _M
