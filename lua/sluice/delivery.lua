-- How a request's answer travels: one value per pass, ctx.delivery, decided here and
-- acted on by sluice/phases.lua (which performs every ngx.exec and every capture);
-- each filter and the log phase branch on it (role(), how()), never on flags.
--
--   how        where                        what happens (phases.deliver)
--   direct     (nil)                        proxied by the location the pass is in
--                                           (location /, or @sluice_fallback)
--   tls        @sluice_tls_<trust>          ngx.exec to the backend's trust location
--                                           (sluice.upstream_tls)
--   relay      /_sluice/buffered[_tls/..]   ngx.location.capture: the answer is
--                                           converted whole, then sent (sluice.relay)
--   stream     the same                     the same subrequest in a light thread, a
--                                           stream passed on piece by piece
--   loop       @sluice_h1_loop              an HTTP/2 request served again as HTTP/1.1
--   job        @sluice_jobs                 to the jobs service (sluice.jobs)
--   fallback   @sluice_fallback             error page: the model's fallback, where
--                                           the second (and last) pass decides again
--   (nil)                                   made here: a refusal, the catalog, a cache
--                                           hit, an error page
--
-- ctx.delivery is a small table kept with its context (sluice.context recycles it
-- cleared): no table per request. Its fields:
--   how, where      this pass's choice (above)                      delivery
--   upstream        the attempts this request's own $upstream_* do  delivery
--                   not show (a relayed pass's subrequest's; and
--                   the request's own before a relayed fallback),
--                   in order: a list of {status, times, header times}
--   own             `upstream` holds this request's own attempts    delivery
--                   too (a relayed pass took them when it began)
--   status          the subrequest's status before its filters      delivery
--   vars, queue     the subrequest's proxying variables; a relayed  relay
--                   stream's pieces (sluice.relay)
local relay = require("sluice.relay")
local new_tab = require("table.new")

local ngx = ngx
local ngx_var = ngx.var

local DIRECT, TLS, RELAY, STREAM = "direct", "tls", "relay", "stream"
local LOOP, JOB, FALLBACK = "loop", "job", "fallback"
local LOOP_LOCATION = "@sluice_h1_loop"
local JOBS_LOCATION = "@sluice_jobs"
local FALLBACK_LOCATION = "@sluice_fallback"

-- role(): what a filter does with the answer passing through it
local OWN = "own"       -- this pass's own answer: converted, cached, counted
local ASIDE = "aside"   -- made by another pass: left alone

local _M = {
    DIRECT = DIRECT, TLS = TLS, RELAY = RELAY, STREAM = STREAM,
    LOOP = LOOP, JOB = JOB, FALLBACK = FALLBACK,
    OWN = OWN, ASIDE = ASIDE,
}

-- ctx.delivery, made with the context's first decision and kept from then on
-- (recycled with it).
local function of(ctx)
    local d = ctx.delivery
    if not d then
        d = new_tab(0, 8)
        ctx.delivery = d
    end
    return d
end

local function joined(first, second)
    if not first then
        return second
    end
    if not second then
        return first
    end
    return first .. ", " .. second
end

-- Access (location / or @sluice_fallback), once the body is converted for backend
-- `backend` (ctx.conv set): direct, tls, relay or stream. Returns how.
function _M.decide(ctx, backend)
    local d = of(ctx)
    local tls = backend.tls
    if relay.wanted(ctx) then
        local how = relay.streams(ctx) and STREAM or RELAY
        d.how, d.where = how, tls and tls.buffered or relay.LOCATION
        d.status, d.vars, d.queue = nil, nil, nil
        -- what this request proxied itself before (a fallback's first pass), then a
        -- slot for the subrequest's attempts (note_subrequest)
        local up = d.upstream
        if not up then
            up = {}
            d.upstream = up
        end
        local status = ngx_var.upstream_status
        if status then
            up[#up + 1] = { status, ngx_var.upstream_response_time,
                            ngx_var.upstream_header_time }
        end
        up[#up + 1] = {}
        d.own = true
        return how
    end
    -- this request proxies again: its own attempts are read at the end
    d.own = nil
    if tls then
        d.how, d.where = TLS, tls.location
        return TLS
    end
    d.how, d.where = DIRECT, nil
    return DIRECT
end

-- The answer is made by the named location `where` (`how`: LOOP, JOB or FALLBACK).
local function handed(ctx, how, where)
    local d = of(ctx)
    d.how, d.where = how, where
end

-- Access, before anything is counted: an HTTP/2 request served again as HTTP/1.1
-- (sluice.relay.loops).
function _M.loop(ctx)
    handed(ctx, LOOP, LOOP_LOCATION)
end

-- Access: a jobs, files or batches request, or one made a job, to the jobs service
-- (sluice.jobs set its headers and URI).
function _M.job(ctx)
    handed(ctx, JOB, JOBS_LOCATION)
end

-- Error page: a 504 of a request armed for a fallback (sluice.fallback.try).
function _M.fallback(ctx)
    handed(ctx, FALLBACK, FALLBACK_LOCATION)
end

-- Access: a relayed answer that nginx ended before its error page (relay.intercepted):
-- the public request's own error page makes the answer now.
function _M.made_here(ctx)
    local d = ctx.delivery
    d.how, d.where = nil, nil
end

-- This pass's how (nil: made here, or no context).
function _M.how(ctx)
    local d = ctx.delivery
    return d and d.how
end

-- Filters: OWN, ASIDE, or (the subrequest of a relayed answer) RELAY or STREAM.
-- The public request of a relayed answer sends what its subrequest made; the
-- HTTP/2 pass of a loop proxies what the HTTP/1.1 pass made.
function _M.role(ctx)
    local d = ctx.delivery
    local how = d and d.how
    if how == RELAY or how == STREAM then
        return ngx.is_subrequest and how or ASIDE
    end
    return how == LOOP and ASIDE or OWN
end

-- The subrequest's filters (role RELAY or STREAM): its attempts so far, for the log
-- phase and the error page of the public request, whose own $upstream_* do not show
-- them; `first`: the header filter, whose status is the backend's (or nginx's),
-- before the filters change it.
function _M.note_subrequest(ctx, first)
    local d = ctx.delivery
    if first then
        d.status = ngx.status
    end
    local up = d.upstream
    local slot = up[#up]
    slot[1], slot[2], slot[3] = ngx_var.upstream_status, ngx_var.upstream_response_time,
                                ngx_var.upstream_header_time
end

-- The subrequest's status before its filters (nil: no subrequest answered yet).
function _M.status(ctx)
    local d = ctx.delivery
    return d and d.status
end

-- Field i (1 status, 2 response times, 3 header times) of every recorded attempt.
local function recorded(up, i)
    local s
    for k = 1, #up do
        s = joined(s, up[k][i])
    end
    return s
end

-- Header times of the subrequests' attempts (nil: none), for the error page.
function _M.header_times(ctx)
    local d = ctx.delivery
    local up = d and d.upstream
    return up and recorded(up, 3)
end

-- Log phase: every attempt of the request, in order, as nginx lists several:
-- `statuses`, `times` are the request's own ($upstream_status, _response_time).
function _M.attempts(ctx, statuses, times)
    local d = ctx.delivery
    local up = d and d.upstream
    if not up then
        return statuses, times
    end
    if d.own then
        return recorded(up, 1), recorded(up, 2)
    end
    return joined(recorded(up, 1), statuses), joined(recorded(up, 2), times)
end

return _M
