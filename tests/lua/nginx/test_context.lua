-- sluice.context: one table per request, found again after a redirect, and emptied
-- and reused after the log phase (recycle) with no field left behind.
local context = require("sluice.context")

local T = {}

-- The groups new() makes with every context.
local MADE = { "req", "caller", "target", "body", "backend", "cache", "fallback" }

-- new() .. finish() .. recycle() of one pretend request in this one (GET /run):
-- `fields` set on the context, `in_groups` (group name -> fields) in its groups.
local function cycle(fields, in_groups)
    local ctx = context.new()
    for k, v in pairs(fields or {}) do
        ctx[k] = v
    end
    for name, group in pairs(in_groups or {}) do
        for k, v in pairs(group) do
            ctx[name][k] = v
        end
    end
    assert(context.finish() == ctx)
    context.recycle(ctx)
    return ctx
end

function T.new_registers_the_request_and_sets_ngx_ctx()
    local before = context.held()
    local ctx = context.new()
    assert(ngx.ctx == ctx, "ngx.ctx is not the context")
    assert(type(ctx.ref) == "number" and ctx.ref > 0, tostring(ctx.ref))
    assert(context.held() == before + 1, context.held())
    assert(context.finish() == ctx)
    assert(context.held() == before, context.held())
    context.recycle(ctx)
end

-- Every field of `ctx` is one of the groups new() makes, empty; returns how many.
local function only_empty_groups(ctx)
    local made, n = {}, 0
    for _, name in ipairs(MADE) do made[name] = true end
    for k, v in pairs(ctx) do
        if k ~= "ref" then
            n = n + 1
            assert(made[k], "left behind: " .. tostring(k))
            assert(type(v) == "table" and next(v) == nil,
                   "left behind: " .. k .. "." .. tostring(next(v)))
        end
    end
    return n
end

function T.new_makes_the_owners_groups()
    local ctx = context.new()
    assert(only_empty_groups(ctx) == #MADE, "not every group was made")
    assert(context.finish() == ctx)
    context.recycle(ctx)
end

function T.recycled_table_is_emptied_and_reused()
    local groups = {}
    local first = context.new()
    for _, name in ipairs(MADE) do groups[name] = first[name] end
    assert(context.finish() == first)
    context.recycle(first)
    local used = cycle({ request_id = "r", conv = {}, upstream_error = "down", error_type = "x" },
          { target = { model_name = "chat", moved = 3 }, caller = { consumer = { id = 7 } },
            backend = { tries = 2, tried_ids = "3" }, body = { doc = { a = 1 } },
            fallback = { to = "b", taken = "b" }, cache = { logged = "HIT" },
            req = { uri = "/v1/chat/completions" } })
    assert(used == first, "the recycled table was not reused")
    assert(only_empty_groups(first) == #MADE, "a group was dropped")
    local again = context.new()
    assert(again == first, "the recycled table was not reused")
    -- as new: its ref and its groups (the same tables, emptied), none of the last
    -- request's fields
    assert(only_empty_groups(again) == #MADE)
    for _, name in ipairs(MADE) do
        assert(again[name] == groups[name], "group " .. name .. " was made again")
    end
    assert(context.finish() == again)
    context.recycle(again)
end

function T.recycled_groups_are_emptied_and_kept_with_their_context()
    -- the groups (sluice.delivery's, sluice.trace's, sluice.tokens', sluice.policy's)
    -- are tables of their own, kept with the context so that no request makes one
    local delivery, trace = { how = "relay", upstream = { { "502" } } }, { id = "t" }
    local usage, quota = { total = 42, keys = {} }, { slot = "s" }
    local first = cycle({ request_id = "r", delivery = delivery, trace = trace,
                          usage = usage, quota = quota }, { target = { model_name = "chat" } })
    assert(first.delivery == delivery and first.trace == trace and first.usage == usage
           and first.quota == quota, "a group's table was not kept")
    for name, group in pairs(first) do
        assert(type(group) == "table" and next(group) == nil,
               "left behind: " .. tostring(name) .. "." .. tostring(next(group or {})))
    end
    local again = context.new()
    assert(again == first and again.usage == usage, "the recycled table was not reused")
    assert(again.ref and again.request_id == nil and again.target.model_name == nil)
    assert(context.finish() == again)
    context.recycle(again)
    -- the next test wants a context without groups: this one is not recycled again
    context.new()
    context.finish()
end

function T.spare_tables_are_bounded_and_reused_last_in_first_out()
    -- recycle 70 contexts: at most 64 are kept, and new() hands them out newest first
    local made = {}
    for i = 1, 70 do
        made[i] = context.new()
        assert(context.finish() == made[i])
    end
    for i = 1, 70 do
        context.recycle(made[i])
    end
    local got = {}
    for i = 1, 65 do
        got[i] = context.new()
        context.finish()
    end
    -- the 64 kept come back newest first; the 65th is a fresh table
    for i = 1, 64 do
        assert(got[i] == made[65 - i], "new() #" .. i .. " is not recycled context #" .. 65 - i)
    end
    for i = 1, 70 do
        assert(got[65] ~= made[i], "more than 64 spare contexts kept")
    end
    for i = 1, 65 do context.recycle(got[i]) end
end

function T.a_context_new_did_not_make_is_not_recycled()
    local fresh = { request_id = "x" }   -- ngx.ctx of a request refused before access
    context.recycle(fresh)
    assert(fresh.request_id == "x", "recycle emptied a table it does not own")
    local ctx = context.new()
    assert(ctx ~= fresh, "a foreign table was handed out as a context")
    context.finish()
    context.recycle(ctx)
end

function T.restore_after_a_redirect_keeps_the_request_drops_the_pass()
    local ctx = context.new()
    local aim, held, cache = ctx.target, ctx.backend, ctx.cache
    aim.model_name, ctx.request_id = "chat", "req-1"
    ctx.conv, held.tried, held.tries, aim.moved = {}, { 1 }, 2, 5
    held.tried_ids, held.pool = "3", {}
    cache.key, cache.status, cache.parts, cache.logged = "k", "MISS", { "a" }, "MISS"
    ngx.ctx = {}   -- what an internal redirect leaves
    local back = context.restore()
    assert(back == ctx and ngx.ctx == ctx, "the context was not found again")
    assert(back.target == aim and back.backend == held and back.cache == cache)
    assert(aim.model_name == "chat" and back.request_id == "req-1")
    assert(held.tried_ids == "3" and held.pool and cache.logged == "MISS",
           "a field of the request was dropped")
    assert(back.conv == nil and held.tried == nil and held.tries == nil
           and aim.moved == nil and cache.key == nil and cache.status == nil
           and cache.parts == nil, "a per-pass field survived")
    -- finish() also finds it by the request's address when ngx.ctx was emptied
    ngx.ctx = {}
    assert(context.finish() == ctx)
    context.recycle(ctx)
end

function T.restore_without_a_context_gives_the_fresh_one()
    local fresh = {}
    ngx.ctx = fresh
    assert(context.restore() == fresh)
    assert(only_empty_groups(fresh) == #MADE, "the fresh one lacks the groups")
    assert(context.finish() == fresh)
    assert(fresh.ref == nil, "a fresh one was registered")
end

return T
