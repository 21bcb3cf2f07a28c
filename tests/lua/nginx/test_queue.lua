-- sluice.queue: waiters of a saturated pool get slots highest class first, round
-- robin between consumers of a class, within a bound in time and in places; a
-- critical request displaces the newest best-effort waiter. Waiters are light
-- threads of this request; `room` (admission's capacity check) is the test's.
local queue = require("sluice.queue")

local T = {}

local RANK = { ["best-effort"] = 1, standard = 2, critical = 3 }

local allowed = 0   -- slots the test's room() lets be reserved at once
local function room(_, _, reserved)
    return reserved <= allowed
end

local seq = 0
local function fresh_pool()
    seq = seq + 1
    allowed = 0
    queue.init(room)
    return { qkey = "test/" .. ngx.now() .. "/" .. seq }
end

-- Waits (a few ms at a time, at most 3 s) until pred() holds.
local function eventually(pred, what)
    local deadline = ngx.now() + 3
    while not pred() do
        assert(ngx.now() < deadline, "timed out waiting for " .. what)
        ngx.sleep(0.002)
    end
end

-- A light thread waiting for a slot; appends `label` to `done` when its wait ends,
-- and keeps what the wait returned in `res[label]`.
local function waiter(pool, class, who, label, done, res, bound, cap)
    return ngx.thread.spawn(function()
        local ctx = { backend = {} }
        local status, typ, msg, extra = queue.wait(ctx, pool, "m", RANK[class], class, who,
                                                   bound or 5, cap or 1)
        res[label] = { ctx = ctx, status = status, type = typ, msg = msg, extra = extra }
        done[#done + 1] = label
    end)
end

-- One more slot at a time: each grant goes to the next waiter in queue order.
local function grant_one_by_one(pool, done, n)
    for k = 1, n do
        allowed = allowed + 1
        queue.dispatch(pool)
        eventually(function() return #done >= k end, "grant #" .. k)
    end
end

function T.highest_class_first()
    local pool = fresh_pool()
    local done, res = {}, {}
    waiter(pool, "best-effort", "c1", "be", done, res)
    waiter(pool, "standard", "c2", "std", done, res)
    waiter(pool, "critical", "c3", "crit", done, res)
    local d = queue.depth(pool)
    assert(d[1] == 1 and d[2] == 1 and d[3] == 1, "depth " .. table.concat(d, ","))
    assert(queue.ahead(pool, 2) == 2 and queue.ahead(pool, 1) == 3)
    ngx.sleep(0.02)
    assert(#done == 0, "granted without room")
    grant_one_by_one(pool, done, 3)
    assert(table.concat(done, " ") == "crit std be", table.concat(done, " "))
    for _, label in ipairs(done) do
        local r = res[label]
        assert(r.status == nil, label .. ": " .. tostring(r.status) .. " " .. tostring(r.msg))
        local held = r.ctx.backend
        assert(held.queue_slot == pool and type(held.queue_ms) == "number")
    end
    -- each grant is a reservation until the balancer claims it
    assert(queue.reserved(pool) == 3, queue.reserved(pool))
    for _, label in ipairs(done) do
        queue.claim(res[label].ctx)
        assert(res[label].ctx.backend.queue_slot == nil)
    end
    assert(queue.reserved(pool) == 0, queue.reserved(pool))
    d = queue.depth(pool)
    assert(d[1] == 0 and d[2] == 0 and d[3] == 0, "depth " .. table.concat(d, ","))
end

function T.round_robin_between_consumers_of_a_class()
    local pool = fresh_pool()
    local done, res = {}, {}
    waiter(pool, "standard", "alice", "a1", done, res)
    waiter(pool, "standard", "alice", "a2", done, res)
    waiter(pool, "standard", "alice", "a3", done, res)
    waiter(pool, "standard", "bob", "b1", done, res)
    waiter(pool, "standard", "carol", "c1", done, res)
    grant_one_by_one(pool, done, 5)
    -- alice came first with three, but bob and carol do not wait behind all of hers
    assert(table.concat(done, " ") == "a1 b1 c1 a2 a3", table.concat(done, " "))
end

function T.a_wait_ends_at_its_bound()
    local pool = fresh_pool()
    local ctx = { backend = {} }
    local started = ngx.now()
    local status, typ, msg, extra = queue.wait(ctx, pool, "chat", 2, "standard", "c", 0.05, 1)
    ngx.update_time()
    assert(status == 503 and typ == "backend_unavailable", tostring(status))
    assert(msg == "model chat is saturated; no slot came free within 50 ms", msg)
    assert(extra.retry_after == 1)
    assert(ngx.now() - started >= 0.04, "returned before its bound")
    local held = ctx.backend
    assert(held.queue_slot == nil and held.queue_ms >= 40, tostring(held.queue_ms))
    local d = queue.depth(pool)
    assert(d[1] == 0 and d[2] == 0 and d[3] == 0, "a timed-out waiter is still counted")
    -- a later grant does not go to the waiter that left
    allowed = 1
    queue.dispatch(pool)
    assert(queue.reserved(pool) == 0, queue.reserved(pool))
end

function T.a_full_queue_refuses_and_critical_displaces_best_effort()
    local pool = fresh_pool()
    local done, res = {}, {}
    -- capacity 1: max(MIN_PLACES, PER_SLOT * 1) places
    local places = math.max(queue.MIN_PLACES, queue.PER_SLOT)
    for i = 1, places do
        waiter(pool, "best-effort", "be" .. i % 3, "be" .. i, done, res)
    end
    assert(queue.ahead(pool, 1) == places)
    local status, _, msg, extra = queue.wait({}, pool, "chat", 2, "standard", "s", 5, 1)
    assert(status == 503 and msg == "model chat is saturated and its queue is full ("
           .. places .. " waiting)", tostring(msg))
    assert(extra.retry_after == 1)

    waiter(pool, "critical", "vip", "crit", done, res)
    -- the newest best-effort waiter gave its place
    eventually(function() return #done == 1 end, "the preempted waiter")
    assert(done[1] == "be" .. places, done[1])
    local r = res[done[1]]
    assert(r.status == 503 and r.msg:find("gave its queue place to a critical one", 1, true),
           tostring(r.msg))
    local d = queue.depth(pool)
    assert(d[1] == places - 1 and d[2] == 0 and d[3] == 1, "depth " .. table.concat(d, ","))

    -- the critical one is served first, then the best-effort ones oldest first
    grant_one_by_one(pool, done, places)
    assert(done[2] == "crit", done[2])
    local be = {}
    for i = 3, #done do be[#be + 1] = done[i] end
    -- round robin over the three consumers be0, be1, be2 (i % 3), each oldest first
    assert(be[1] == "be1" and be[2] == "be2" and be[3] == "be3", table.concat(be, " "))
end

function T.a_reservation_never_used_goes_back_to_the_next_waiter()
    local pool = fresh_pool()
    local done, res = {}, {}
    waiter(pool, "standard", "x", "first", done, res)
    waiter(pool, "standard", "y", "second", done, res)
    allowed = 1
    queue.dispatch(pool)
    eventually(function() return #done == 1 end, "the first grant")
    assert(done[1] == "first" and queue.reserved(pool) == 1)
    -- its request ended before the balancer (log phase): the slot goes on
    queue.release(res.first.ctx, pool)
    assert(res.first.ctx.backend.queue_slot == nil)
    eventually(function() return #done == 2 end, "the second grant")
    assert(done[2] == "second" and queue.reserved(pool) == 1, queue.reserved(pool))
    queue.claim(res.second.ctx)
    assert(queue.reserved(pool) == 0)
end

return T
