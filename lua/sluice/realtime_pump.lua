-- A realtime session once admitted (sluice/realtime.lua): the caller's upgrade
-- (lua-resty-websocket), then frames both ways as they come (sluice/ws_frames.lua),
-- one light thread per direction, and a watch that closes the session when it has
-- been idle for the model's timeout_ms or has lasted the plan's realtime_session_s.
-- Each frame is forwarded as soon as it is whole (a fragmented message fragment by
-- fragment): nothing waits for a whole event stream. Each thread is the only writer of
-- the socket it forwards to (pings go through to the other side like data, and the
-- other side's pong comes back the same way); the closing frames are sent by the
-- request's own thread once the others are stopped (or done).
--
-- How a session ends (ctx.backend.realtime: closed_by, close_code):
--   the caller's close frame      forwarded to the backend, echoed; closed_by client
--   the caller's socket drops     backend gets 1001; closed_by client, code 1006
--   the backend's close frame     forwarded to the caller; closed_by backend (a 1011
--                                 counts as a backend failure)
--   the backend's socket drops    caller gets 1011; closed_by backend; a failure in the
--                                 backend's breaker and stats
--   idle / too long               both get 1000 "idle timeout" / 1008 "session length
--                                 limit"; closed_by gateway
--   the worker exits (reload)     both get 1001 "gateway restarting"; closed_by gateway
-- Then the log phase (log()): one access-log line for the session, metrics, usage.
local server = require("nginx.websocket.server")
local cjson = require("cjson.safe")
local buffer = require("string.buffer")
local metrics = require("sluice.metrics")
local accesslog = require("sluice.accesslog")
local observe = require("sluice.observe")
local breaker = require("sluice.breaker")
local stats = require("sluice.stats")
local limits = require("sluice.limits")
local policy = require("sluice.policy")
local admission = require("sluice.admission")
local usage = require("sluice.usage")
local tokens = require("sluice.tokens")
local realtime = require("sluice.realtime")
local fields = require("sluice.bytes").fields
local ws_frames = require("sluice.ws_frames")

local ngx = ngx
local ngx_var = ngx.var
local ngx_now = ngx.now
local ngx_sleep = ngx.sleep
local ngx_log = ngx.log
local WARN = ngx.WARN
local spawn = ngx.thread.spawn
local wait = ngx.thread.wait
local kill = ngx.thread.kill
local worker_exiting = ngx.worker.exiting
local req_start_time = ngx.req.start_time
local str_find = string.find
local str_sub = string.sub
local type = type
local tostring = tostring
local floor = math.floor
local recv_frame = ws_frames.recv
local send_frame = ws_frames.send
local MAX_PAYLOAD = realtime.MAX_PAYLOAD

local OPCODE = { text = 0x1, binary = 0x2, continuation = 0x0, ping = 0x9, pong = 0xa }
local WATCH_STEP = 0.25   -- seconds between the watch's looks at the clock
local NO_STATUS = 1005    -- a close frame without a code (RFC 6455)
local ABNORMAL = 1006     -- the socket dropped without a close frame
-- why the gateway closes a session -> the close code and reason it sends both sides
local GATEWAY_CLOSE = { idle = { 1000, "idle timeout" }, limit = { 1008, "session length limit" },
                        exiting = { 1001, "gateway restarting" } }
local DRAIN_S = 2         -- how long a closed caller is given to answer our close frame
                          -- (and a writer to finish a frame before it: between_frames)
local TYPE_WITHIN = 256   -- an event's "type" is within its first bytes (gather)
local DURATION_BUCKETS = { 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600 }

local _M = {}

metrics.register("sluice_realtime_sessions", "gauge",
                 "Realtime (WebSocket) sessions open now, by model.", { "model" })
metrics.register("sluice_realtime_session_duration_seconds", "histogram",
                 "Length of finished realtime sessions.", { "model", "closed_by" },
                 DURATION_BUCKETS)
metrics.register("sluice_realtime_events_total", "counter",
                 "Realtime events (WebSocket messages) passed, by direction: in (caller "
                 .. "to backend) or out.", { "model", "direction" })

-- Tokens a `response.done` event reports (OpenAI's Realtime usage), into the session.
local function read_usage(ctx, data)
    if not str_find(data, "response.done", 1, true) then
        return
    end
    local doc = cjson.decode(data)
    if type(doc) ~= "table" or doc.type ~= "response.done" then
        return
    end
    local u = type(doc.response) == "table" and doc.response.usage
    if type(u) == "table" then
        tokens.add(ctx, u.input_tokens, u.output_tokens, u.total_tokens)
    end
end

-- A backend's text message that came in fragments (`typ` "text" first, then
-- "continuation"s, `fin` on the last): gathered in `msg` (a string.buffer, or nil)
-- while it may be a `response.done`, whose tokens are read at its end; dropped once
-- its first TYPE_WITHIN bytes are known not to be one (audio deltas are not kept).
-- Returns the message gathered so far, or nil.
local function gather(ctx, msg, typ, data, fin)
    if typ == "text" then
        if #data >= TYPE_WITHIN and not str_find(data, "response.done", 1, true) then
            return nil
        end
        msg = buffer.new()
    elseif typ ~= "continuation" or not msg then
        return nil   -- a binary message's pieces
    end
    local before = #msg
    msg:put(data)
    if #msg > MAX_PAYLOAD then
        return nil
    end
    if before < TYPE_WITHIN and (#msg >= TYPE_WITHIN or fin) then
        if not str_find(msg:tostring(), "response.done", 1, true) then
            return nil
        end
    end
    if fin then
        read_usage(ctx, msg:tostring())
        return nil
    end
    return msg
end

-- Frames from `from` to `to` until one side closes or fails. `up`: the caller's side
-- is `from`. Returns who ended it ("client" or "backend"), how ("close" or "lost"),
-- and a close frame's code and reason. Once the session is closing (s.closing), the
-- caller's frames are read and dropped until its close frame answers ours.
local function pump(ctx, s, from, to, up)
    local own, other = up and "client" or "backend", up and "backend" or "client"
    -- frames by sluice.ws_frames on the objects' sockets: a caller's frames come
    -- masked, ours to the backend go masked (we are its client)
    local from_sock, to_sock = from.sock, to.sock
    local writing = up and "to_backend" or "to_client"   -- s[writing]: a frame half sent
    local msg   -- a fragmented text message of the backend's (gather)
    while true do
        local data, typ, err = recv_frame(from_sock, MAX_PAYLOAD, up)
        if not data then
            -- a read timeout between frames is not an end (the watch decides that);
            -- one inside a frame is: the stream is out of step
            if s.closing or not (err and str_find(err, "first 2 bytes: timeout", 1, true)) then
                return own, "lost", nil, err
            end
        elseif typ == "close" then
            return own, "close", err, data
        elseif not s.closing then
            s.last = ngx_now()
            local fin = err ~= "again"
            s[writing] = true
            local bytes, serr = send_frame(to_sock, fin, OPCODE[typ], data, up)
            s[writing] = nil
            if not bytes then
                return other, "lost", nil, serr
            end
            if typ ~= "ping" and typ ~= "pong" then
                local n = #data
                if up then
                    s.bytes_in = s.bytes_in + n
                    if fin then s.events_in = s.events_in + 1 end
                else
                    s.bytes_out = s.bytes_out + n
                    if fin then
                        s.events_out = s.events_out + 1
                    end
                    if fin and typ == "text" then   -- a message in one frame
                        read_usage(ctx, data)
                    elseif msg or not fin then      -- in fragments
                        msg = gather(ctx, msg, typ, data, fin)
                    end
                end
            end
        end
    end
end

local function watch(s)
    while true do
        ngx_sleep(WATCH_STEP)
        if worker_exiting() then   -- a reload or a stop: new sessions go to new workers
            return "gateway", "exiting"
        end
        local now = ngx_now()
        if s.limit_at and now >= s.limit_at then
            return "gateway", "limit"
        end
        -- (a frame still on its way to a slow reader is no idleness: the socket's own
        -- timeout ends a reader that takes nothing)
        if now - s.last >= s.idle_s and not (s.to_client or s.to_backend) then
            return "gateway", "idle"
        end
    end
end

local function sleeper(seconds)
    ngx_sleep(seconds)
end

-- Once the session is closing, a writer in the middle of a frame (the other side
-- reads slowly: a full socket buffer) finishes it before the close frame goes on
-- that socket: stopped mid-frame, it would leave half a frame there, and the close
-- frame after it would be garbage to that side. Waits for `s[writing]` to clear, at
-- most DRAIN_S; true when the socket is between frames.
local function between_frames(s, writing)
    local deadline = ngx_now() + DRAIN_S
    while s[writing] do
        if ngx_now() >= deadline then
            return false
        end
        ngx_sleep(0.01)
    end
    return true
end

-- The caller has our close frame: the thread reading it (`up`) ends when the caller's
-- own close frame comes, which it usually does at once. Closing the connection before
-- that, with the caller's frames unread, would reset it, and a reset can destroy our
-- close frame before the caller reads it. After DRAIN_S the thread is stopped (which
-- closes the caller's socket).
local function drain(up)
    local timer = spawn(sleeper, DRAIN_S)
    wait(up, timer)
    kill(up)
    kill(timer)
end

-- Close both sides as the session's end says; sets s.closed_by, s.close_code and
-- s.failed (the backend failed the session). Stopping a thread that waits to read a
-- socket closes that socket; each socket's writer is stopped (or done) before this
-- thread writes to it. (`backend` reads only what the backend sends: stopping it
-- loses nothing the caller would still get.)
local function close(s, caller, backend, up, down, by, how, code, reason)
    s.closed_by = by
    s.closing = true
    local clean   -- the caller's socket is between frames (down stopped)
    if by == "client" then          -- up is done: the backend socket is ours to write
        if how == "close" then
            backend:send_close(code, reason)
            clean = between_frames(s, "to_client")
            kill(down)
            if clean then
                caller:send_close(code, reason)   -- the echo RFC 6455 asks for
            end
        else
            backend:send_close(1001, "caller went away")
            kill(down)
            code = ABNORMAL
        end
    else                            -- down is done or stopped: the caller socket is ours
        clean = between_frames(s, "to_client")
        kill(down)
        -- up forwards nothing once closing: the backend socket, once between frames
        local to_backend = how ~= "lost" and between_frames(s, "to_backend")
        if by == "gateway" then
            code, reason = GATEWAY_CLOSE[how][1], GATEWAY_CLOSE[how][2]
            if clean then caller:send_close(code, reason) end
            if to_backend then backend:send_close(code, reason) end
        elseif how == "close" then  -- the backend's close frame, passed on, and echoed
            if clean then caller:send_close(code, reason) end
            if to_backend then backend:send_close(code, reason) end
            s.failed = code == 1011
        else                        -- the backend's socket dropped, or writing to it failed
            ngx_log(WARN, "realtime backend lost mid-session: ", tostring(reason))
            code = 1011
            if clean then caller:send_close(code, "backend connection lost") end
            s.failed = true
        end
        if clean then
            drain(up)
        else
            kill(up)   -- no close frame to answer: the caller's socket closes now
        end
    end
    s.close_code = code or NO_STATUS
    backend.sock:close()
end

-- Content phase, after realtime.admit: upgrade the caller (answering with
-- `protocol`, the one subprotocol chosen, or none) and run the session to its end.
function _M.serve(ctx, protocol)
    local s = ctx.backend.realtime
    local backend = s.backend_ws
    if protocol then
        ngx.req.set_header("Sec-WebSocket-Protocol", protocol)   -- what server echoes
    else
        ngx.req.clear_header("Sec-WebSocket-Protocol")
    end
    local caller, err = server:new({ max_payload_len = realtime.MAX_PAYLOAD,
                                     timeout = s.idle_s * 1000 })
    if not caller then
        backend.sock:close()
        ngx_log(WARN, "realtime upgrade failed: ", err)
        s.closed_by, s.close_code = "client", ABNORMAL
        return
    end
    local model = ctx.target.model_name
    s.open = true
    metrics.inc("sluice_realtime_sessions", 1, model)
    s.last = ngx_now()
    s.limit_at = s.limit_s and s.started + s.limit_s
    local up = spawn(pump, ctx, s, caller, backend, true)
    local down = spawn(pump, ctx, s, backend, caller, false)
    local watcher = spawn(watch, s)
    local ok, by, how, code, reason = wait(up, down, watcher)
    kill(watcher)
    if not ok then
        ngx_log(WARN, "realtime session thread failed: ", by)
        by, how = "backend", "lost"
    end
    close(s, caller, backend, up, down, by, how, code, reason)
end

-- Log phase of a /v1/realtime request: a refused one is logged like any request; a
-- session gives its slot back, its outcome to the backend's breaker and stats, and
-- one line with its own fields.
function _M.log(ctx)
    local s = ctx.backend.realtime
    if s and s.open and not (ctx.usage and ctx.usage.total) then
        tokens.add(ctx, 0, 0, 0)   -- no response.done: no tokens, not the reservation
    end
    policy.release(ctx)   -- the token reservation settles at what the events reported
    admission.release(ctx)
    if s and s.slot then   -- refused after the cap let it in, or the session's end
        limits.leave(s.slot)
    end
    if not s or not s.backend then
        local _, times, bytes_sent = fields(ngx_var.sl_logf)
        return observe.log(ctx, times, bytes_sent)
    end
    usage.log(ctx)
    local model = ctx.target.model_name
    local now = ngx_now()
    local duration = now - s.started
    local b = s.backend
    local backend = b.name or b.id_s
    if s.open then
        usage.seconds(ctx, duration)
        metrics.inc("sluice_realtime_sessions", -1, model)
        metrics.observe("sluice_realtime_session_duration_seconds", duration, model,
                        s.closed_by or "client")
        metrics.inc("sluice_realtime_events_total", s.events_in, model, "in")
        metrics.inc("sluice_realtime_events_total", s.events_out, model, "out")
        stats.record(b.id_s, not s.failed, nil)
        breaker.record(b.id_s, not s.failed, ctx.backend.breaker_cfg)
    end
    local consumer = ctx.caller.consumer
    local plan = consumer.plan_name
    plan = type(plan) == "string" and plan or "none"
    local status = ngx.status
    metrics.inc("sluice_requests_total", 1, model, backend, status, plan)
    local _, _, bytes_sent = fields(ngx_var.sl_logf)
    local line = accesslog.line(ctx, now, "GET", ctx.req.uri or "/v1/realtime", status, bytes_sent,
                                consumer.name or tostring(consumer.id), plan, model, backend,
                                floor((now - req_start_time()) * 1000 + 0.5),
                                s.connect_ms and floor(s.connect_ms + 0.5))
    local extra = buffer.new(256)
    extra:putf('","realtime_duration_ms":"%d","realtime_bytes_in":"%d","realtime_bytes_out":'
               .. '"%d","realtime_events_in":"%d","realtime_events_out":"%d","close_code":'
               .. '"%s","closed_by":"%s"}', floor(duration * 1000 + 0.5), s.bytes_in,
               s.bytes_out, s.events_in, s.events_out, tostring(s.close_code or ""),
               s.closed_by or "")
    ngx_var.sl_line = str_sub(line, 1, -3) .. extra:tostring()
end

return _M
