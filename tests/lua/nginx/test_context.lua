-- sluice.context: one table per request, found again after a redirect, and emptied
-- and reused after the log phase (recycle) with no field left behind.
local context = require("sluice.context")

local T = {}

-- new() .. finish() .. recycle() of one pretend request in this one (GET /run).
local function cycle(fields)
    local ctx = context.new()
    for k, v in pairs(fields or {}) do
        ctx[k] = v
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

function T.recycled_table_is_emptied_and_reused()
    local first = cycle({ model_name = "chat", consumer = { id = 7 }, tries = 2,
                          usage_total = 42, conv = {}, request_doc = { a = 1 } })
    assert(next(first) == nil, "a field was left behind: " .. tostring(next(first)))
    local again = context.new()
    assert(again == first, "the recycled table was not reused")
    -- as new: only its ref, none of the last request's fields
    local n = 0
    for k in pairs(again) do
        n = n + 1
        assert(k == "ref", "left behind: " .. tostring(k))
    end
    assert(n == 1, n)
    assert(context.finish() == again)
    context.recycle(again)
end

function T.recycled_groups_are_emptied_and_kept_with_their_context()
    -- the groups (sluice.delivery's, sluice.trace's, sluice.tokens', sluice.policy's)
    -- are tables of their own, kept with the context so that no request makes one
    local delivery, trace = { how = "relay", upstream = { { "502" } } }, { id = "t" }
    local usage, quota = { total = 42, keys = {} }, { slot = "s" }
    local first = cycle({ model_name = "chat", delivery = delivery, trace = trace,
                          usage = usage, quota = quota })
    assert(first.delivery == delivery and first.trace == trace and first.usage == usage
           and first.quota == quota, "a group's table was not kept")
    for name, group in pairs(first) do
        assert(type(group) == "table" and next(group) == nil,
               "left behind: " .. tostring(name) .. "." .. tostring(next(group or {})))
    end
    local again = context.new()
    assert(again == first and again.usage == usage, "the recycled table was not reused")
    assert(again.ref and again.model_name == nil)
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
    local fresh = { model_name = "x" }   -- ngx.ctx of a request refused before access
    context.recycle(fresh)
    assert(fresh.model_name == "x", "recycle emptied a table it does not own")
    local ctx = context.new()
    assert(ctx ~= fresh, "a foreign table was handed out as a context")
    context.finish()
    context.recycle(ctx)
end

function T.restore_after_a_redirect_keeps_the_request_drops_the_pass()
    local ctx = context.new()
    ctx.model_name, ctx.request_id = "chat", "req-1"
    ctx.conv, ctx.cache, ctx.tried, ctx.tries, ctx.moved = {}, {}, { 1 }, 2, 5
    ngx.ctx = {}   -- what an internal redirect leaves
    local back = context.restore()
    assert(back == ctx and ngx.ctx == ctx, "the context was not found again")
    assert(back.model_name == "chat" and back.request_id == "req-1")
    assert(back.conv == nil and back.cache == nil and back.tried == nil
           and back.tries == nil and back.moved == nil, "a per-pass field survived")
    -- finish() also finds it by the request's address when ngx.ctx was emptied
    ngx.ctx = {}
    assert(context.finish() == ctx)
    context.recycle(ctx)
end

function T.restore_without_a_context_gives_the_fresh_one()
    local fresh = {}
    ngx.ctx = fresh
    assert(context.restore() == fresh)
    assert(context.finish() == fresh)
end

return T
