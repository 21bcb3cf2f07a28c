-- GET /v1/realtime?model=…: a caller's WebSocket session proxied to a backend of
-- protocol `openai_realtime` (OpenAI's Realtime API), event by event, in Lua, so that
-- the gateway counts events, reads token usage from `response.done`, and closes idle,
-- overlong and orphaned sessions (sluice/realtime_pump.lua moves the frames).
--
-- Admission happens before the upgrade, so every refusal is an ordinary HTTP answer
-- in the error template: 401 without a key, 403 for a bad one, 400 for no `model` or
-- a model with no realtime backend, 429 past the plan's caps (realtime_plans.lua and
-- the plan's usual rate limit, quotas and max_concurrent), 503 with no backend
-- available or the pool saturated (backends' max_in_flight counts open sessions),
-- 502 when no backend accepted the WebSocket handshake. The key comes in
-- `Authorization: Bearer <key>` (or X-API-Key), or, as browsers must send it, as the
-- subprotocol `openai-insecure-api-key.<key>` of Sec-WebSocket-Protocol; that entry is
-- removed before anything is echoed to the caller or sent to the backend, and the
-- key is never logged.
--
-- The backend is chosen by the pool's balancer (weights x health, open circuits
-- skipped); a backend that refuses the connection or the handshake counts as a
-- failure in its breaker and stats, and another is tried (balancer.MAX_RETRIES).
-- Only this module and realtime_pump.lua write the context of a /v1/realtime request
-- (ctx.backend.realtime; ctx.caller, ctx.target's model, ctx.body as steps.lua and
-- target.lua do for other requests).
local config = require("sluice.config")
local ip_limit = require("sluice.ip_limit")
local auth = require("sluice.auth")
local balancer = require("sluice.balancer")
local breaker = require("sluice.breaker")
local stats = require("sluice.stats")
local policy = require("sluice.policy")
local limits = require("sluice.limits")
local usage = require("sluice.usage")
local health = require("sluice.health")
local admission = require("sluice.admission")
local client = require("nginx.websocket.client")

local ngx = ngx
local ngx_var = ngx.var
local ngx_req = ngx.req
local ngx_now = ngx.now
local ngx_log = ngx.log
local WARN = ngx.WARN
local tcp = ngx.socket.tcp
local encode_base64 = ngx.encode_base64
local sha1_bin = ngx.sha1_bin
local md5_bin = ngx.md5_bin
local re_match = ngx.re.match
local str_find = string.find
local str_sub = string.sub
local str_lower = string.lower
local str_gmatch = string.gmatch
local concat = table.concat
local type = type
local tonumber = tonumber
local tostring = tostring
local math_random = math.random
local min = math.min

local PROTOCOL = "openai_realtime"       -- the backend protocol (pool) that serves it
local KEY_PROTOCOL = "openai-insecure-api-key."
local ENDPOINT = { name = "realtime", kind = "realtime" }   -- for sluice.usage
local CONNECT_TIMEOUT = 5                -- seconds; the model's timeout_ms caps it
local MAX_PAYLOAD = 16 * 1024 * 1024     -- one frame, either way (base64 audio chunks)
local WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
local NO_BODY = {}   -- what a session "asks": tokens.DEFAULT_MAX_TOKENS are reserved

local _M = { PROTOCOL = PROTOCOL, MAX_PAYLOAD = MAX_PAYLOAD }

-- The caller's Sec-WebSocket-Protocol list: the key it carries (or nil), and the
-- other entries, comma-separated (or nil).
local function split_protocols(value)
    if type(value) == "table" then
        value = concat(value, ",")
    end
    if not value then
        return nil, nil
    end
    local key, rest = nil, nil
    for item in str_gmatch(value, "[^,%s]+") do
        if str_sub(item, 1, #KEY_PROTOCOL) == KEY_PROTOCOL then
            key = str_sub(item, #KEY_PROTOCOL + 1)
        else
            rest = rest and rest .. ", " .. item or item
        end
    end
    return key, rest
end

-- The one subprotocol the gateway answers with: "realtime" when offered (what the
-- browser client asks for), else the first offered; nil: none offered.
local function chosen_protocol(rest)
    if not rest then
        return nil
    end
    for item in str_gmatch(rest, "[^,%s]+") do
        if item == "realtime" then
            return item
        end
    end
    return (str_gmatch(rest, "[^,%s]+")())
end

-- A WebSocket opening handshake (RFC 6455) over HTTP/1.1, as the upgrade will need it
-- (checked before a backend is chosen, so that a bad one costs no backend).
local function is_upgrade(h)
    local up, conn = h.upgrade, h.connection
    if type(up) == "table" then up = up[1] end
    if type(conn) == "table" then conn = concat(conn, ",") end
    return ngx_req.http_version() == 1.1 and up ~= nil and str_lower(up) == "websocket"
           and conn ~= nil and str_find(str_lower(conn), "upgrade", 1, true) ~= nil
           and type(h["sec-websocket-key"]) == "string" and h["sec-websocket-version"] == "13"
end

-- The WebSocket handshake on `sock` (connected to backend `b`): true, or nil, the
-- backend's HTTP status (nil when it sent none) and a message.
local function handshake(sock, b, path, protocols, request_id)
    local key = encode_base64(md5_bin(request_id .. ngx_now() .. math_random()))
    local req = { "GET ", path, " HTTP/1.1\r\nHost: ", b.host_header,
                  "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ",
                  key, "\r\nSec-WebSocket-Version: 13\r\nX-Request-Id: ", request_id }
    if b.auth_header ~= "" then
        req[#req + 1] = "\r\nAuthorization: " .. b.auth_header
    end
    if protocols then
        req[#req + 1] = "\r\nSec-WebSocket-Protocol: " .. protocols
    end
    local beta = ngx_var.http_openai_beta
    if beta then
        req[#req + 1] = "\r\nOpenAI-Beta: " .. beta
    end
    req[#req + 1] = "\r\n\r\n"
    local ok, err = sock:send(concat(req))
    if not ok then
        return nil, nil, "failed to send the handshake: " .. err
    end
    local head
    head, err = sock:receiveuntil("\r\n\r\n")()
    if not head then
        return nil, nil, "no handshake answer: " .. err
    end
    local m = re_match(head, [[^HTTP/1\.[01] (\d\d\d)]], "jo")
    if not m then
        return nil, nil, "not an HTTP answer to the handshake"
    end
    local status = tonumber(m[1])
    if status ~= 101 then
        return nil, status, "the backend answered the handshake with HTTP " .. m[1]
    end
    local accept = re_match(head, [[\r\nSec-WebSocket-Accept:\s*(\S+)]], "joi")
    if not accept or accept[1] ~= encode_base64(sha1_bin(key .. WS_GUID)) then
        return nil, status, "the backend's Sec-WebSocket-Accept is wrong"
    end
    return true
end

-- A connected, upgraded WebSocket to backend `b` (a lua-resty-websocket client
-- object on our own socket: its connect() checks neither the 101 nor the accept
-- key), or nil, the backend's HTTP status (or nil) and a message.
local function open_backend(b, model, protocols, request_id)
    local wb = client:new({ max_payload_len = MAX_PAYLOAD })
    local sock = tcp()
    wb.sock = sock
    sock:settimeouts(min(model.timeout, CONNECT_TIMEOUT) * 1000, model.timeout * 1000,
                     model.timeout * 1000)
    local ok, err = sock:connect(b.host, b.port)
    if not ok then
        return nil, nil, "failed to connect: " .. err
    end
    if b.tls then
        ok, err = sock:sslhandshake(nil, b.tls.name, true)
        if not ok then
            sock:close()
            return nil, nil, "TLS handshake failed: " .. err
        end
    end
    local path = b.base_path .. "/v1/realtime"
    local args = ngx_var.args
    if args then
        path = path .. "?" .. args
    end
    local status
    ok, status, err = handshake(sock, b, path, protocols, request_id)
    if not ok then
        sock:close()
        return nil, status, err
    end
    return wb
end

-- Admission, before the upgrade. Returns status, type, message[, extra] to refuse;
-- else nil and what the session needs: the subprotocol to answer with (or nil) and
-- the protocols to offer the backend. Writes ctx.caller (consumer, attributes),
-- ctx.target (model_name, model), ctx.body (doc, len: no body), ctx.backend.realtime
-- (the session's record) and, through
-- policy.check, usage.count and balancer.choose, their groups.
function _M.admit(ctx)
    if ngx_req.get_method() ~= "GET" then
        ngx.header["Allow"] = "GET"
        return 405, "method_not_allowed", "/v1/realtime only accepts GET"
    end
    local h = ngx_req.get_headers()
    local key, rest = split_protocols(h["sec-websocket-protocol"])
    if key then   -- the key never goes further than this
        if rest then
            ngx_req.set_header("Sec-WebSocket-Protocol", rest)
        else
            ngx_req.clear_header("Sec-WebSocket-Protocol")
        end
    end
    local snap = config.get()
    if not snap then
        return 503, "backend_unavailable", "the gateway has no configuration yet",
               { retry_after = 1 }
    end
    if snap.ip_limit then   -- the per-IP limit, before the key lookup (sluice.ip_limit)
        local status, ip_type, ip_msg, extra = ip_limit.check(snap.ip_limit,
                                                              ip_limit.address(snap.ip_limit))
        if status then
            return status, ip_type, ip_msg, extra
        end
    end
    local authz = ctx.req.authorization
    if not authz and key and key ~= "" then
        authz = "Bearer " .. key
    end
    local consumer, attributes, err_type, msg = auth.authenticate(snap, authz)
    if not consumer then
        return attributes, err_type, msg
    end
    local caller, target = ctx.caller, ctx.target
    caller.consumer, caller.attributes = consumer, attributes
    if not is_upgrade(h) then
        return 400, "invalid_request", "/v1/realtime is a WebSocket endpoint: an HTTP/1.1 "
               .. "upgrade (Upgrade: websocket, Sec-WebSocket-Key, Sec-WebSocket-Version: 13)"
    end
    local model_name = ngx_var.arg_model
    if not model_name or model_name == "" then
        return 400, "invalid_request", "the query parameter model is required",
               { param = "model" }
    end
    model_name = ngx.unescape_uri(model_name)
    target.model_name = model_name
    local model = snap.models[model_name]
    if not model then
        return 404, "not_found", "unknown model " .. model_name
    end
    if not auth.allowed(consumer, model_name) then
        return 403, "forbidden", "this key may not use model " .. model_name
    end
    local pool = model.pools[PROTOCOL]
    if not pool then
        return 400, "invalid_request", "model " .. model_name
               .. " has no realtime backend", { param = "model" }
    end
    target.model = model

    local caps = consumer.plan_id and snap.realtime_caps
                 and snap.realtime_caps[consumer.plan_id]
    local s = { started = ngx_now(), bytes_in = 0, bytes_out = 0, events_in = 0,
                events_out = 0, limit_s = caps and caps.session_s,
                idle_s = model.timeout }
    ctx.backend.realtime = s
    if caps and caps.sessions then
        local slot = "rt:" .. consumer.key_id
        local entered, err = limits.enter(slot, caps.sessions)
        if entered == false then
            return 429, "rate_limited", "too many realtime sessions (plan " .. caps.name
                   .. " allows " .. caps.sessions .. " at once)", { retry_after = 1 }
        elseif entered then
            s.slot = slot
        else
            ngx_log(WARN, "realtime session cap unavailable: ", err)
        end
    end
    local status, msg2, extra
    -- a session reserves tokens as a request with no body and no max_tokens does
    -- (monthly_tokens: refused when they do not fit), and is charged at its end what
    -- its response.done events reported (sluice.tokens settles it)
    local body = ctx.body
    body.doc, body.len = NO_BODY, 0
    status, err_type, msg2, extra = policy.check(ctx, snap, consumer, model_name, true)
    if status then
        return status, err_type, msg2, extra
    end
    usage.count(ctx, ENDPOINT, consumer, model_name)
    -- a session counts against its backend's max_in_flight for as long as it lasts;
    -- a saturated pool queues or refuses it as any request (sluice.admission)
    status, err_type, msg2, extra = admission.admit(ctx, snap, consumer, model_name, pool)
    if status then
        return status, err_type, msg2, extra
    end
    return _M.connect(ctx, snap, pool, model, model_name, rest)
end

-- The backend: chosen by the balancer, connected and upgraded; up to
-- balancer.MAX_RETRIES others after a failure. Returns status, type, message[,
-- extra] to refuse, or nil, nil, nil, nil, the subprotocol to answer with.
function _M.connect(ctx, snap, pool, model, model_name, protocols)
    local s = ctx.backend.realtime
    local last_err = "no backend"
    for _ = 1, balancer.MAX_RETRIES + 1 do
        local b, retry_after = balancer.choose(ctx, pool, snap.breaker)
        if not b then
            local status, err_type, msg, extra = health.refuse(pool, model_name)
            if status then
                return status, err_type, msg, extra
            end
            if retry_after then
                return 503, "backend_unavailable", "every realtime backend of model "
                       .. model_name .. " has an open circuit",
                       { retry_after = retry_after > 0 and retry_after or 1 }
            end
            if s.tried then
                break
            end
            return 503, "backend_unavailable", "no realtime backend of model "
                   .. model_name .. " is available"
        end
        admission.attempt(ctx)   -- the in-flight count moves to this backend
        local t0 = ngx_now()
        local wb, status, err = open_backend(b, model, protocols, ctx.request_id or "")
        if wb then
            s.backend, s.backend_ws = b, wb
            s.connect_ms = (ngx_now() - t0) * 1000
            return nil, nil, nil, nil, chosen_protocol(protocols)
        end
        -- a 4xx answer is the backend refusing this caller's request, not a failure
        local failed = not status or status >= 500
        if failed then
            stats.record(b.id_s, false, nil)
            breaker.record(b.id_s, false, ctx.backend.breaker_cfg)
        end
        ngx_log(WARN, "realtime backend ", b.name or b.id_s, " (", b.host, ":", b.port,
                "): ", err)
        s.tried = (s.tried or 0) + 1
        last_err = err
        if not failed then
            return 502, "backend_error", "the realtime backend refused the session: " .. err
        end
    end
    return 502, "backend_error", "no realtime backend accepted the session: "
           .. tostring(last_err)
end

return _M
