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
-- (sluice/context.lua).
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

local _M = {}
_M.DEFAULT_MAX_TOKENS = DEFAULT_MAX_TOKENS

local function requested_max(doc)
    local n = doc.max_completion_tokens
    if type(n) ~= "number" then
        n = doc.max_tokens
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

-- Access phase, once admitted: the request holds `reserve` tokens on counter `key`
-- until settled.
function _M.hold(ctx, key, reserve)
    ctx.token_key, ctx.token_reserved = key, reserve
    ctx.usage_scan = true
end

local function take_usage(ctx, usage)
    if type(usage) ~= "table" then
        return
    end
    local p, c = usage.prompt_tokens, usage.completion_tokens
    local total = usage.total_tokens
    if type(total) ~= "number" then
        if type(p) ~= "number" or type(c) ~= "number" then
            return
        end
        total = p + c
    end
    ctx.usage_total = total
    ctx.prompt_tokens = type(p) == "number" and p or nil
    ctx.completion_tokens = type(c) == "number" and c or nil
end

-- Settle the reservation at `used` tokens, once. Called as soon as the outcome is
-- known (end of the answer, error page), before the caller has the last byte, so a
-- caller's next request already sees the settled counter; the log phase catches
-- what is left.
local function settle(ctx, used)
    local key = ctx.token_key
    if not key then
        return      -- none held, or settled earlier in this request
    end
    local reserved = ctx.token_reserved
    ctx.token_key = false
    if used ~= reserved then
        limits.add(key, used - reserved)
    end
end

local function take_body(ctx, body)
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
        return take_usage(ctx, usage)
    end
    local doc = cjson.decode(body)
    if type(doc) == "table" then
        take_usage(ctx, doc.usage)
    end
end

-- SSE: scan complete lines for a data event with "usage"; keep the unfinished tail.
local function scan_sse(ctx, chunk)
    local buf = ctx.usage_carry
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
                local u = str_find(buf, '"usage"', pos, true)
                if u and u < nl then
                    local event = cjson.decode(str_sub(buf, pos + 6, nl - 1))
                    if type(event) == "table" then
                        take_usage(ctx, event.usage)
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
    ctx.usage_carry = #rest <= MAX_CARRY and rest or nil
end

-- body_filter: cheap unless this request holds a reservation. The settlement happens
-- as soon as the usage is known: for SSE at the usage event (before [DONE]), for JSON
-- when Content-Length bytes have passed (nginx sends its eof only after the client
-- already has them), else at eof.
function _M.body_filter(ctx)
    if ctx.usage_done then
        return
    end
    local chunk, eof = ngx_arg[1], ngx_arg[2]
    if ctx.usage_sse == nil then
        -- the answer the caller gets (after a conversion's header filter): its
        -- Content-Length and Content-Type in one variable ($sl_sent, a map in
        -- nginx.conf.tmpl: the headers as nginx keeps them, no header list to scan)
        local len, ct = fields(ngx_var.sl_sent)
        ctx.usage_sse = ct ~= nil and str_find(ct, "text/event-stream", 1, true) ~= nil
        ctx.usage_len = len and tonumber(len)
        ctx.usage_n, ctx.usage_bytes = 0, 0
    end
    if ctx.usage_sse then
        if chunk ~= "" then
            scan_sse(ctx, chunk)
        end
        if ctx.usage_total then
            ctx.usage_done = true
            settle(ctx, ctx.usage_total)
        end
        return
    end
    local bytes = ctx.usage_bytes + #chunk
    ctx.usage_bytes = bytes
    local complete = eof or (ctx.usage_len ~= nil and bytes >= ctx.usage_len)
    if complete and ctx.usage_n == 0 then
        -- the whole answer in one buffer, the common case for small JSON
        ctx.usage_done = true
        take_body(ctx, chunk)
    elseif bytes <= MAX_BODY then
        if chunk ~= "" then
            local parts = ctx.usage_parts
            if not parts then
                parts = {}
                ctx.usage_parts = parts
            end
            local n = ctx.usage_n + 1
            parts[n] = chunk
            ctx.usage_n = n
        end
        if complete then
            ctx.usage_done = true
            take_body(ctx, concat(ctx.usage_parts, "", 1, ctx.usage_n))
        end
    else
        ctx.usage_done = true     -- too large to parse: the log phase settles
        ctx.usage_parts = nil
    end
    if ctx.usage_total then
        settle(ctx, ctx.usage_total)
    end
end

-- error page: the request failed, nothing was generated.
function _M.refund(ctx)
    settle(ctx, 0)
end

-- log: settle what is still open.
function _M.reconcile(ctx)
    if not ctx.token_key then
        return
    end
    local used = ctx.usage_total
    if not used then
        if ngx.status >= 400 or not ctx.usage_scan then
            used = 0      -- refused, failed or never forwarded: nothing was generated
        else
            used = ctx.token_reserved
        end
    end
    settle(ctx, used)
end

return _M
