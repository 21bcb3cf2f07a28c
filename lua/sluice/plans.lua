-- Plans from the snapshot: validation and the per-model limit tables the hot path
-- reads. A plan's `models` overrides replace single fields for one model; each
-- overridden field also gets its own counter scope (":<model>") so that a model with
-- its own rate has its own bucket, while the other models share the plan's (":*").
local cjson = require("cjson.safe")
local media_caps = require("sluice.media_caps")   -- audio and image caps per day

local type = type
local pairs = pairs
local tostring = tostring
local floor = math.floor
local ceil = math.ceil
local max = math.max

local json_null = cjson.null

local DEFAULT_RATE = 100   -- requests per second, the product brief's default

-- snapshot field -> compiled field; the order is the one limits are checked in
local FIELDS = {
    rate_per_second = "rate",
    burst = "burst",
    max_concurrent = "concurrent",
    daily_requests = "daily",
    monthly_requests = "monthly",
    monthly_tokens = "tokens",
}
local OVERRIDABLE = {
    rate_per_second = true, burst = true, daily_requests = true,
    monthly_requests = true, monthly_tokens = true,
}

local _M = {}

local function present(v)
    return v ~= nil and v ~= json_null
end

local function check_field(name, v, where)
    if not present(v) then
        return nil
    end
    if type(v) ~= "number" or v ~= v then
        return where .. "." .. name .. ": must be a number or null"
    end
    if name == "rate_per_second" then
        if v <= 0 then return where .. ".rate_per_second: must be > 0" end
    elseif v < 1 or floor(v) ~= v then
        return where .. "." .. name .. ": must be an integer >= 1 or null"
    end
    return nil
end

-- Returns nil, or a message naming the first bad field.
function _M.validate(plans)
    if plans == nil then
        return nil
    end
    if type(plans) ~= "table" then
        return "plans: must be an object"
    end
    for id, p in pairs(plans) do
        local where = "plans." .. tostring(id)
        if type(id) ~= "string" then return "plans: must be an object" end
        if type(p) ~= "table" then return where .. ": must be an object" end
        for name in pairs(FIELDS) do
            local err = check_field(name, p[name], where)
            if err then return err end
        end
        local perr = present(p.rate_per_ip) and (type(p.rate_per_ip) ~= "number"
                     or p.rate_per_ip <= 0) and where .. ".rate_per_ip: must be > 0 or null"
        if perr then return perr end
        local merr = media_caps.validate(p, where)
        if merr then return merr end
        if present(p.models) then
            if type(p.models) ~= "table" then return where .. ".models: must be an object" end
            for mname, o in pairs(p.models) do
                local mwhere = where .. ".models." .. tostring(mname)
                if type(mname) ~= "string" or type(o) ~= "table" then
                    return mwhere .. ": must be an object"
                end
                for name, v in pairs(o) do
                    if not OVERRIDABLE[name] then
                        return mwhere .. "." .. tostring(name) .. ": is not a per-model limit"
                    end
                    local err = check_field(name, v, mwhere)
                    if err then return err end
                end
            end
        end
    end
    return nil
end

local function finish(lim)
    lim.burst = lim.burst or max(1, ceil(lim.rate))
    return lim
end

local function compile_one(p)
    local base = { name = p.name, rate = DEFAULT_RATE, media_caps = media_caps.compile(p) }
    for name, field in pairs(FIELDS) do
        if present(p[name]) then
            base[field] = p[name]
        end
        base[field .. "_scope"] = ":*"
    end
    local burst_given = base.burst ~= nil
    local models = {}
    if present(p.models) then
        for mname, o in pairs(p.models) do
            local lim = {}
            for k, v in pairs(base) do lim[k] = v end
            for name, v in pairs(o) do
                local field = FIELDS[name]
                lim[field] = present(v) and v or nil
                lim[field .. "_scope"] = ":" .. mname
            end
            -- a model with its own rate and no burst of its own: one second's worth
            if present(o.rate_per_second) and not present(o.burst) then
                lim.burst = burst_given and base.burst or nil
                lim.burst_scope = lim.rate_scope
            end
            models[mname] = finish(lim)
        end
    end
    -- rate_per_ip: per client address of the plan's callers (sluice.ip_limit)
    return { base = finish(base), models = models,
             per_ip = present(p.rate_per_ip) and p.rate_per_ip or nil }
end

-- Snapshot plans -> { [id string] = { base = limits, models = { [name] = limits } } }
function _M.compile(plans)
    local out = {}
    if type(plans) == "table" then
        for id, p in pairs(plans) do
            out[tostring(id)] = compile_one(p)
        end
    end
    return out
end

-- The limits for `model_name` under `plan`.
function _M.limits(plan, model_name)
    return plan.models[model_name] or plan.base
end

return _M
