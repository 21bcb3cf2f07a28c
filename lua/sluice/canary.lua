-- Route versions: a model's requests may be sent to another model (a version) by
-- percentage, optionally only for consumers whose attributes match, sticky per
-- consumer. Snapshot, per model:
--
--   "routes": [{"target": "chat-v2", "percent": 5, "when": {"user_type": "vip"}}, ...]
--
-- Each consumer falls in one bucket 0..99 per model (crc32 of "<consumer id>:<model>"),
-- so it always gets the same version while the routes stay the same. Routes are
-- tried in order; a route whose `when` matches ngx.ctx.attributes claims the next
-- `percent` buckets; the first route that claims the consumer's bucket wins, and a
-- consumer no route claims stays on the model it asked for.
local ngx = ngx
local crc32 = ngx.crc32_short
local type = type
local pairs = pairs
local ipairs = ipairs
local tostring = tostring
local floor = math.floor
local next = next

local _M = {}

-- Validation of one model's "routes"; returns nil or a message.
function _M.validate(routes, where, models)
    if routes == nil then return nil end
    if type(routes) ~= "table" then return where .. ".routes: must be a list" end
    for i, r in ipairs(routes) do
        local w = where .. ".routes[" .. i .. "]"
        if type(r) ~= "table" then return w .. ": must be an object" end
        if type(r.target) ~= "string" or models[r.target] == nil then
            return w .. ".target: must name a model of the snapshot"
        end
        local p = r.percent
        if type(p) ~= "number" or floor(p) ~= p or p < 0 or p > 100 then
            return w .. ".percent: must be an integer in 0..100"
        end
        if r.when ~= nil then
            if type(r.when) ~= "table" then return w .. ".when: must be an object" end
            for k, v in pairs(r.when) do
                local tv = type(v)
                if type(k) ~= "string" or (tv ~= "string" and tv ~= "number"
                                           and tv ~= "boolean") then
                    return w .. ".when: must map attribute names to scalars"
                end
            end
        end
    end
    return nil
end

-- Compiled form: { {target = name, percent = n, when = {...} | nil}, ... } or nil.
function _M.compile(routes)
    if type(routes) ~= "table" or #routes == 0 then return nil end
    local out = {}
    for i, r in ipairs(routes) do
        local when = r.when
        if type(when) == "table" and next(when) == nil then when = nil end
        out[i] = { target = r.target, percent = r.percent, when = when }
    end
    return out
end

local function matches(when, attributes)
    if not when then return true end
    if not attributes then return false end
    for k, v in pairs(when) do
        if attributes[k] ~= v then return false end
    end
    return true
end

-- The model name to serve for `model` (compiled) and this consumer; the model's own
-- name when no route claims the consumer.
function _M.choose(model, consumer, attributes)
    local routes = model.routes
    if not routes then return model.name end
    local bucket = crc32(tostring(consumer.id) .. ":" .. model.name) % 100
    local offset = 0
    for i = 1, #routes do
        local r = routes[i]
        if matches(r.when, attributes) then
            local upto = offset + r.percent
            if bucket < upto then
                return r.target
            end
            offset = upto
        end
    end
    return model.name
end

return _M
