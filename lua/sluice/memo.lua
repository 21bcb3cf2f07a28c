-- Worker-local tables that make a missing entry once and keep it: the shared-dict
-- keys of a backend or a pool, built on first use instead of concatenated on every
-- request. Their keys come from the snapshot (backend ids, pool keys): a bounded set.
-- Pure: runs under plain luajit.
local setmetatable = setmetatable

local _M = {}

-- A table whose t[k] is build(k), made on first read and kept.
function _M.new(build)
    return setmetatable({}, { __index = function(t, k)
        local v = build(k)
        t[k] = v
        return v
    end })
end

-- A table whose t[id] is prefix .. id.
function _M.prefixed(prefix)
    return _M.new(function(id) return prefix .. id end)
end

return _M
