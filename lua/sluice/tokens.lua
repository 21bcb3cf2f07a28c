-- Token quotas for LLM requests: reserve before forwarding, reconcile afterwards.
--
--   access:      reserve = ceil(body bytes / 4) + max_tokens (or DEFAULT_MAX_TOKENS);
--                policy.check counts it on the month's counter with the request's
--                other limits (limits.take_all); over the quota -> given back, 429
--   body_filter: find `usage` in the answer (a JSON body, buffered up to MAX_BODY; or
--                the SSE event that carries it, usually the last before [DONE])
--   settle:      incr the counter by (used - reserved) as soon as the answer ends
--                (body_filter at eof, or the error page: refund); the log phase
--                settles the rest: no usage seen -> keep the reservation as the
--                charge, unless the request failed (refund)
--
-- So a burst of long requests cannot overrun the quota: each one holds its worst case
-- until the backend says what it really used. Bytes / 4 overestimates tokens for
-- most text; it only has to be an upper bound until reconciliation.
-- The reservation rides in the request's context, which survives error_page
-- (sluice/context.lua), in its usage group, ctx.usage (made by of(), kept with the
-- context):
--   scan              scan the answer for `usage` (hold, scan, fallback)
--   key, reserved     the token reservation's counter (false: settled) and tokens
--   total, prompt, completion   what the answer reported (log line, usage counters)
--   sse, len, n, bytes, parts, carry, done   the body filter's scan state
--   keys              sluice.usage's counter keys of this request (its one writer)
local cjson = require("cjson.safe")
local limits = require("sluice.limits")
local scan = require("sluice.scan")

local ngx = ngx
local ngx_var = ngx.var
local fields = require("sluice.bytes").fields
local find = require("sluice.bytes").find   -- plain find by memmem: "usage" in an answer
local ngx_arg = ngx.arg
local str_find = string.find
local str_sub = string.sub
local concat = table.concat
local tonumber = tonumber
local type = type
local ceil = math.ceil
local floor = math.floor

local DEFAULT_MAX_TOKENS = 1024    -- reserved when the request sets no max_tokens
local MAX_BODY = 1024 * 1024       -- a JSON answer larger than this is not parsed
local MAX_CARRY = 64 * 1024        -- an SSE line longer than this is not parsed
local new_tab = require("table.new")

local _M = {}
_M.DEFAULT_MAX_TOKENS = DEFAULT_MAX_TOKENS

local function requested_max(doc)
    local n = doc.max_completion_tokens
    if type(n) ~= "number" then
        n = doc.max_tokens
    end
    if type(n) ~= "number" then
        n = doc.max_output_tokens   -- the Responses API's name
    end
    if type(n) == "number" and n >= 0 and n < 2 ^ 31 then
        return floor(n)
    end
    return DEFAULT_MAX_TOKENS
end

-- Access phase: the tokens this request reserves.
function _M.reservation(body_len, doc)
    return ceil(body_len / 4) + requested_max(doc)
end

-- ctx.usage, made on first use (a table kept with the context after that).
function _M.of(ctx)
    local u = ctx.usage
    if not u then
        u = new_tab(0, 8)
        ctx.usage = u
    end
    return u
end

-- Access phase, once admitted: the request holds `reserve` tokens on counter `key`
-- until settled.
function _M.hold(ctx, key, reserve)
    local u = _M.of(ctx)
    u.key, u.reserved = key, reserve
    u.scan = true
end

-- Access phase (sluice.usage): scan the answer for `usage`, or (false) not.
function _M.scan(ctx, on)
    _M.of(ctx).scan = on
end

-- Access phase of @sluice_fallback: the fallback's answer settles the reservation
-- of the first pass, if any.
function _M.fallback(ctx)
    local u = ctx.usage
    if u then
        u.scan = u.key and true or nil
    end
end

local function take_usage(u, usage)
    if type(usage) ~= "table" then
        return
    end
    local p, c = usage.prompt_tokens, usage.completion_tokens
    if p == nil then
        -- Responses' and Anthropic's names; Anthropic's cache reads and writes are
        -- prompt tokens too
        p, c = usage.input_tokens, usage.output_tokens
        if type(p) == "number" then
            local r, w = usage.cache_read_input_tokens, usage.cache_creation_input_tokens
            p = p + (type(r) == "number" and r or 0) + (type(w) == "number" and w or 0)
        end
    end
    local total = usage.total_tokens
    if type(total) ~= "number" then
        if type(p) ~= "number" or type(c) ~= "number" then
            return
        end
        total = p + c
    end
    u.total = total
    u.prompt = type(p) == "number" and p or nil
    u.completion = type(c) == "number" and c or nil
end

-- Settle the reservation at `used` tokens, once. Called as soon as the outcome is
-- known (end of the answer, error page), before the caller has the last byte, so a
-- caller's next request already sees the settled counter; the log phase catches
-- what is left.
local function settle(u, used)
    local key = u.key
    if not key then
        return      -- none held, or settled earlier in this request
    end
    local reserved = u.reserved
    u.key = false
    if used ~= reserved then
        limits.add(key, used - reserved)
    end
end

local function take_body(u, body)
    if #body > MAX_BODY then
        return
    end
    local at = find(body, '"usage"', 1)
    if not at then
        return
    end
    -- the usage object's numbers without decoding the whole answer, else a decode
    local usage = scan.usage(body, at)
    if usage then
        return take_usage(u, usage)
    end
    local doc = cjson.decode(body)
    if type(doc) == "table" then
        take_usage(u, doc.usage)
    end
end

-- SSE: scan complete lines for a data event with "usage"; keep the unfinished tail.
local function scan_sse(u, chunk)
    local buf = u.carry
    buf = buf and buf .. chunk or chunk
    local last = 0      -- end of the last complete line
    if str_find(buf, '"usage"', 1, true) then
        local pos = 1
        while true do
            local nl = str_find(buf, "\n", pos, true)
            if not nl then
                break
            end
            if str_sub(buf, pos, pos + 5) == "data: " then
                local at = str_find(buf, '"usage"', pos, true)
                if at and at < nl then
                    local event = cjson.decode(str_sub(buf, pos + 6, nl - 1))
                    if type(event) == "table" then
                        local r = event.response   -- Responses' response.completed
                        take_usage(u, type(r) == "table" and r.usage or event.usage)
                    end
                end
            end
            last = nl
            pos = nl + 1
        end
    else
        last = str_find(buf, "\n[^\n]*$") or 0
    end
    local rest = str_sub(buf, last + 1)
    u.carry = #rest <= MAX_CARRY and rest or nil
end

-- body_filter: cheap unless this request holds a reservation. The settlement happens
-- as soon as the usage is known: for SSE at the usage event (before [DONE]), for JSON
-- when Content-Length bytes have passed (nginx sends its eof only after the client
-- already has them), else at eof.
function _M.body_filter(ctx)
    local u = ctx.usage
    if u.done then
        return
    end
    local chunk, eof = ngx_arg[1], ngx_arg[2]
    if u.sse == nil then
        -- the answer the caller gets (after a conversion's header filter): its
        -- Content-Length and Content-Type in one variable ($sl_sent, a map in
        -- nginx.conf.tmpl: the headers as nginx keeps them, no header list to scan)
        local len, ct = fields(ngx_var.sl_sent)
        u.sse = ct ~= nil and str_find(ct, "text/event-stream", 1, true) ~= nil
        u.len = len and tonumber(len)
        u.n, u.bytes = 0, 0
    end
    if u.sse then
        if chunk ~= "" then
            scan_sse(u, chunk)
        end
        if u.total then
            u.done = true
            settle(u, u.total)
        end
        return
    end
    local bytes = u.bytes + #chunk
    u.bytes = bytes
    local complete = eof or (u.len ~= nil and bytes >= u.len)
    if complete and u.n == 0 then
        -- the whole answer in one buffer, the common case for small JSON
        u.done = true
        take_body(u, chunk)
    elseif bytes <= MAX_BODY then
        if chunk ~= "" then
            local parts = u.parts
            if not parts then
                parts = {}
                u.parts = parts
            end
            local n = u.n + 1
            parts[n] = chunk
            u.n = n
        end
        if complete then
            u.done = true
            take_body(u, concat(u.parts, "", 1, u.n))
        end
    else
        u.done = true     -- too large to parse: the log phase settles
        u.parts = nil
    end
    if u.total then
        settle(u, u.total)
    end
end

-- A realtime session (sluice.realtime_pump): the tokens one `response.done` event
-- reported (input, output, total; nil when absent), added to what the session used.
function _M.add(ctx, p, c, total)
    p = type(p) == "number" and p or 0
    c = type(c) == "number" and c or 0
    total = type(total) == "number" and total or p + c
    local u = _M.of(ctx)
    u.prompt = (u.prompt or 0) + p
    u.completion = (u.completion or 0) + c
    u.total = (u.total or 0) + total
end

-- error page: the request failed, nothing was generated.
function _M.refund(ctx)
    local u = ctx.usage
    if u then
        settle(u, 0)
    end
end

-- log: settle what is still open.
function _M.reconcile(ctx)
    local u = ctx.usage
    if not u or not u.key then
        return
    end
    local used = u.total
    if not used then
        if ngx.status >= 400 or not u.scan then
            used = 0      -- refused, failed or never forwarded: nothing was generated
        else
            used = u.reserved
        end
    end
    settle(u, used)
end

return _M
