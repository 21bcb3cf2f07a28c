-- The wait for a slot of a saturated pool (sluice.admission decides who waits).
--
-- Waiters of every worker share one queue per pool, in the sluice_queue dict
-- ("P" is the pool's qkey, "c" the class rank 1..3, "C" a consumer id):
--
--   seq             ticket counter (a ticket is one waiting request)
--   n:P, n:P:c      waiters of the pool, of one class (depth)
--   r:P             slots handed to waiters that the balancer has not counted yet
--   ring:P:c        consumers of class c with waiters, round-robin order (list)
--   in:P:c:C        C is in that ring (set by whoever pushes it there)
--   q:P:c:C         C's tickets, oldest first (list)
--   be:P            best-effort tickets, oldest first (list): the preemption victims
--   w:T             ticket T waits (its worker deletes it when T leaves)
--   o:T             T's outcome: "g" granted, "c" cancelled, "p" preempted
--
-- The outcome is written with dict:add, which only the first writer wins: a grant,
-- the waiter's own timeout or abort and a preemption race for it, and the loser backs
-- off. A grant first reserves the slot (incr r:P, checked against the class's limit),
-- so a waiter holds no backend count while it waits and no newcomer can take a slot
-- that was handed out; the balancer phase turns the reservation into the backend's
-- count (claim), the log phase gives back one never used (release).
--
-- Who hands slots out (dispatch): the log phase of the request that frees one (it
-- only reads and writes the dict and posts semaphores), the waiter itself when it
-- joins, and every POLL seconds a timer of each worker that has waiters. A waiter
-- sleeps on its own ngx.semaphore: posted at once when the grant is made in its
-- worker, else by its worker's timer, which looks at its waiters' outcomes (no busy
-- loop: the timer runs only while the worker has waiters).
--
-- FIXME: races, in the candour of lua-resty-limit-traffic (N: nginx workers).
-- (1) Dispatchers of several workers may run at once; each reservation is checked
-- after it is counted, so grants never overshoot a limit, but newcomers that find
-- room (admission) are counted only in the balancer, as before: a limit can still be
-- overshot by up to N - 1 at the instant it is reached. (2) Workers may pass the
-- queue-length check at once: a queue can hold N - 1 more than its places. (3) A
-- trim of be:P (pop the oldest, push it back if it still waits) can hide the one
-- victim from a preemption at the same instant: that critical request is refused as
-- at a full queue. (4) A waiter is counted (n:P:c) a moment before its ticket is in
-- the ring; a dispatcher of another worker that finds the count but no ticket serves
-- the next class down, so one grant can go to a lower class in that instant, and two
-- dispatchers can swap two grants of one class. (5) A worker that dies (not a
-- reload) leaves its waiters counted in the depth until nginx restarts, as the
-- in-flight counts; its tickets' keys expire and dispatch skips them. (6) A waiter
-- that learns its outcome more than DECIDED seconds late would cancel a grant's
-- reservation away: one slot lost until restart (a worker stalled that long has
-- worse trouble).
local semaphore = require("ngx.semaphore")
local metrics = require("sluice.metrics")
local memo = require("sluice.memo")

local ngx = ngx
local ngx_now = ngx.now
local ngx_log = ngx.log
local ERR = ngx.ERR
local timer_at = ngx.timer.at
local pairs = pairs
local tostring = tostring
local max = math.max
local floor = math.floor

local dict = ngx.shared.sluice_queue

local POLL = 0.005     -- seconds between a worker's looks while it has waiters
local PER_SLOT = 4     -- queue places per slot of the pool's capacity
local MIN_PLACES = 16
local KEEP = 60        -- seconds a waiter's liveness key outlives its bound (a dead worker)
local DECIDED = 30     -- seconds an outcome is kept after the waiter left (see dispatch)
local SLICE = 0.5      -- a waiter looks at its outcome itself at least this often
local MS = 0.001
local SCAN = 64        -- consumers one look may skip; stale tickets are all dropped
local RETRY_AFTER = 1

local _M = { POLL = POLL, PER_SLOT = PER_SLOT, MIN_PLACES = MIN_PLACES }

-- pool's queue key -> its depth key "n:<key>", made once per worker: every request
-- of a pool reads it in its log phase (dispatch)
local depth_key = memo.prefixed("n:")

metrics.register("sluice_queue_wait_seconds", "histogram",
                 "Time requests waited in the gateway for a slot of a saturated pool.",
                 { "model", "priority" })
metrics.register("sluice_queue_depth", "gauge",
                 "Requests waiting for a slot, at scrape time.", { "model", "priority" })
metrics.register("sluice_queue_outcomes_total", "counter",
                 "How waits ended: admitted, timeout, preempted (a critical request "
                 .. "took the place), aborted (the caller went away), full (no place).",
                 { "model", "priority", "outcome" })

local waiters = {}   -- this worker's: ticket -> { sema, pool, woken, aborted }
local nwaiting = 0
local polling = false
local room           -- admission's: function(pool, rank, reserved) -> slot free?

-- admission hands its capacity check in (it requires this module, not the reverse).
function _M.init(room_check)
    room = room_check
end

local function decr_depth(P, c)
    dict:incr("n:" .. P .. ":" .. c, -1, 0)
    dict:incr(depth_key[P], -1, 0)
end

local function wake(t)
    local w = waiters[t]
    if w and not w.woken then
        w.woken = true
        w.sema:post(1)
    end
end

-- Pop the next live ticket of class c, round robin over consumers, and grant it.
local function grant_next(P, c)
    local pc = P .. ":" .. c
    local ring = "ring:" .. pc
    for _ = 1, SCAN do
        local who = dict:lpop(ring)
        if not who then
            return nil
        end
        local q = "q:" .. pc .. ":" .. who
        local t = dict:lpop(q)
        -- skip the tickets that left already (timeout, abort, preempted); the
        -- outcome outlives the liveness key by DECIDED seconds, so a ticket leaving
        -- between the two reads is never granted
        while t and not (dict:get("w:" .. t) and dict:add("o:" .. t, "g", DECIDED)) do
            t = dict:lpop(q)
        end
        if (dict:llen(q) or 0) > 0 then
            dict:rpush(ring, who)
        else
            -- the flag goes first: a consumer joining now pushes itself, or we do
            local flag = "in:" .. pc .. ":" .. who
            dict:delete(flag)
            if (dict:llen(q) or 0) > 0 and dict:add(flag, true) then
                dict:rpush(ring, who)
            end
        end
        if t then
            return t
        end
    end
end

-- Hand free slots of `pool` to its waiters, highest class first. Any phase: no I/O.
function _M.dispatch(pool)
    local P = pool.qkey
    if (dict:get(depth_key[P]) or 0) <= 0 then
        return
    end
    local rkey = "r:" .. P
    for c = 3, 1, -1 do
        while (dict:get("n:" .. P .. ":" .. c) or 0) > 0 do
            local r = dict:incr(rkey, 1, 0)
            if not r or not room(pool, c, r) then
                dict:incr(rkey, -1, 0)
                return   -- lower classes have lower limits
            end
            local t = grant_next(P, c)
            if not t then
                dict:incr(rkey, -1, 0)
                break
            end
            decr_depth(P, c)
            wake(t)
        end
    end
end

local function poll(premature)
    if premature or nwaiting <= 0 then
        polling = false
        return
    end
    local pools = {}
    for t, w in pairs(waiters) do
        if not w.woken and dict:get("o:" .. t) then
            wake(t)
        end
        pools[w.pool.qkey] = w.pool
    end
    for _, pool in pairs(pools) do
        _M.dispatch(pool)
    end
    local ok, err = timer_at(POLL, poll)
    if not ok then
        polling = false
        ngx_log(ERR, "queue: no poll timer: ", err)
    end
end

-- Waiters of `pool` whose class is `rank` or higher.
function _M.ahead(pool, rank)
    local P = pool.qkey
    if (dict:get(depth_key[P]) or 0) <= 0 then
        return 0
    end
    local n = 0
    for c = rank, 3 do
        n = n + (dict:get("n:" .. P .. ":" .. c) or 0)
    end
    return n
end

-- Slots handed to waiters and not yet counted against a backend.
function _M.reserved(pool)
    return dict:get("r:" .. pool.qkey) or 0
end

-- The newest best-effort waiter leaves (503) for a critical request.
local function preempt(P)
    local be = "be:" .. P
    local t = dict:rpop(be)
    while t do   -- the tickets that left already are dropped
        if dict:get("w:" .. t) and dict:add("o:" .. t, "p", DECIDED) then
            decr_depth(P, 1)
            wake(t)
            return true
        end
        t = dict:rpop(be)
    end
    return false
end

local function join(P, c, who, t, bound)
    dict:set("w:" .. t, true, bound + KEEP)
    dict:incr("n:" .. P .. ":" .. c, 1, 0)
    dict:incr(depth_key[P], 1, 0)
    local pc = P .. ":" .. c
    local ok, err = dict:rpush("q:" .. pc .. ":" .. who, t)
    if not ok then
        return nil, err
    end
    if dict:add("in:" .. pc .. ":" .. who, true) then
        dict:rpush("ring:" .. pc, who)
    end
    if c == 1 then
        local be = "be:" .. P
        -- drop the tickets at the old end that left already (bounded list)
        for _ = 1, SCAN do
            local old = dict:lpop(be)
            if not old then break end
            if dict:get("w:" .. old) and not dict:get("o:" .. old) then
                dict:lpush(be, old)
                break
            end
        end
        dict:rpush(be, t)
    end
    return true
end

-- Access phase: wait up to `bound` seconds for a slot of `pool` (capacity `cap`).
-- Returns nil with the slot reserved (sets ctx.backend.queue_slot, .queue_ms); or a
-- status, type, message, extra: 503 (timeout, preempted, no place) or 499 (the
-- caller went away).
function _M.wait(ctx, pool, model_name, rank, class, who, bound, cap)
    local P = pool.qkey
    local places = max(MIN_PLACES, PER_SLOT * cap)
    if (dict:get(depth_key[P]) or 0) >= places and not (rank == 3 and preempt(P)) then
        metrics.inc("sluice_queue_outcomes_total", 1, model_name, class, "full")
        return 503, "backend_unavailable", "model " .. model_name .. " is saturated and its "
               .. "queue is full (" .. places .. " waiting)", { retry_after = RETRY_AFTER }
    end
    local t, err = dict:incr("seq", 1, 0)
    if not t then
        ngx_log(ERR, "queue: no ticket: ", err)
        return 503, "backend_unavailable", "model " .. model_name .. " is saturated",
               { retry_after = RETRY_AFTER }
    end
    t = tostring(t)
    local sema = semaphore.new(0)
    local w = { sema = sema, pool = pool }
    local started = ngx_now()
    local ok
    ok, err = join(P, rank, who, t, bound)
    if not ok then
        dict:delete("w:" .. t)
        decr_depth(P, rank)
        ngx_log(ERR, "queue: cannot join: ", err)
        return 503, "backend_unavailable", "model " .. model_name .. " is saturated",
               { retry_after = RETRY_AFTER }
    end
    waiters[t] = w
    nwaiting = nwaiting + 1
    if not polling then
        polling = true
        local tok, terr = timer_at(POLL, poll)
        if not tok then
            polling = false
            ngx_log(ERR, "queue: no poll timer: ", terr)
        end
    end
    ngx.on_abort(function()
        w.aborted = true
        sema:post(1)
    end)
    _M.dispatch(pool)   -- the slot may be free already

    local outcome
    repeat
        -- ngx.now() is cached per event-loop turn and semaphore timeouts are whole
        -- milliseconds: a wait under 1 ms would return at once, without yielding,
        -- and never see the clock move (a spin). Under 1 ms left is the end.
        local left = bound - (ngx_now() - started)
        local over = left < MS
        if not over then
            -- in slices: a worker shutting down (reload) stops its poll timer
            sema:wait(left < SLICE and left or SLICE)
        end
        outcome = dict:get("o:" .. t)
        if not outcome and (over or w.aborted) then
            if dict:add("o:" .. t, "c", DECIDED) then
                decr_depth(P, rank)
                outcome = "c"
            else
                outcome = dict:get("o:" .. t)
            end
        end
        w.woken = false
    until outcome

    waiters[t] = nil
    nwaiting = nwaiting - 1
    dict:delete("w:" .. t)
    local waited = ngx_now() - started
    local held = ctx.backend
    held.queue_ms = floor(waited * 1000 + 0.5)
    metrics.observe("sluice_queue_wait_seconds", waited, model_name, class)
    if outcome == "g" then
        held.queue_slot = pool
        if w.aborted then
            metrics.inc("sluice_queue_outcomes_total", 1, model_name, class, "aborted")
            return 499   -- the log phase gives the slot back
        end
        metrics.inc("sluice_queue_outcomes_total", 1, model_name, class, "admitted")
        return
    elseif w.aborted then
        metrics.inc("sluice_queue_outcomes_total", 1, model_name, class, "aborted")
        return 499
    elseif outcome == "p" then
        metrics.inc("sluice_queue_outcomes_total", 1, model_name, class, "preempted")
        return 503, "backend_unavailable", "model " .. model_name .. " is saturated; this "
               .. class .. " request gave its queue place to a critical one",
               { retry_after = RETRY_AFTER }
    end
    metrics.inc("sluice_queue_outcomes_total", 1, model_name, class, "timeout")
    return 503, "backend_unavailable", "model " .. model_name .. " is saturated; no slot "
           .. "came free within " .. floor(bound * 1000 + 0.5) .. " ms",
           { retry_after = RETRY_AFTER }
end

-- Balancer phase, after the backend's count was taken: the reservation is spent
-- (clears ctx.backend.queue_slot).
function _M.claim(ctx)
    local held = ctx.backend
    local pool = held.queue_slot
    if pool then
        held.queue_slot = nil
        dict:incr("r:" .. pool.qkey, -1, 0)
    end
end

-- Log phase, after the backend's count was given back: a reservation never used
-- goes back (clears ctx.backend.queue_slot), and the pool's waiters get the free
-- slots.
function _M.release(ctx, pool)
    local backend = ctx.backend
    local held = backend.queue_slot
    if held then
        backend.queue_slot = nil
        dict:incr("r:" .. held.qkey, -1, 0)
        _M.dispatch(held)
    end
    if pool and pool ~= held then
        _M.dispatch(pool)   -- one dict read when nobody waits
    end
end

-- Waiters of `pool` by class rank: { [1] = n, [2] = n, [3] = n }.
function _M.depth(pool)
    local P = pool.qkey
    return { max(0, dict:get("n:" .. P .. ":1") or 0), max(0, dict:get("n:" .. P .. ":2") or 0),
             max(0, dict:get("n:" .. P .. ":3") or 0) }
end

return _M
