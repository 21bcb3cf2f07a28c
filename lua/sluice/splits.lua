-- Route splits: a public model name split between target models (canary, A/B), with
-- conditions on the caller's attributes. Snapshot section "routes" (docs/contracts.md):
--
--   routes = { [name] = { sticky = true, versions = {
--       { model = "chat-b", percent = 100, conditions = { {attr=, op=, value=} } },
--       { model = "chat-a", percent = 90 }, { model = "chat-b", percent = 10 } } } }
--
-- Conditional versions are tried first, in order: a caller whose attributes match all
-- of a version's conditions goes there with probability percent/100, else on. Then
-- the unconditioned versions split the rest by percent (relative to their sum, so a
-- version left out of the snapshot hands its share to the others).
--
-- Sticky routes draw from crc32(route, caller): the same caller lands on the same
-- version as long as the percents hold. The caller is the consumer plus, when the
-- request carries one (a JWT), the `sub` attribute: one JWT consumer serves many
-- end users, and each of them sticks on its own.
--
-- The backend is asked for the chosen model (an OpenAI body's "model" is rewritten),
-- so the answer's "model" names the version that answered; so does the
-- X-Sluice-Route-Version header, the "route" field of the access log line and
-- sluice_route_requests_total{route, version}.
local cjson = require("cjson.safe")
local metrics = require("sluice.metrics")

local ngx = ngx
local ngx_req = ngx.req
local re_gsub = ngx.re.gsub
local re_sub = ngx.re.sub
local crc32 = ngx.crc32_short
local random = math.random
local randomseed = math.randomseed
local floor = math.floor
local type = type
local pairs = pairs
local ipairs = ipairs
local tostring = tostring

local json_null = cjson.null

local OPS = { eq = true, ne = true, ["in"] = true }
local SCALAR = { string = true, number = true, boolean = true }

local _M = {}

metrics.register("sluice_route_requests_total", "counter",
                 "Requests a route sent to each of its versions (target models).",
                 { "route", "version" })

-- Non-sticky routes draw with math.random: give each worker its own sequence.
function _M.init_worker()
    randomseed(ngx.now() * 1000 + ngx.worker.pid())
end

local function bad_value(v)
    return not SCALAR[type(v)]
end

local function validate_condition(c, where)
    if type(c) ~= "table" then return where .. ": must be an object" end
    if type(c.attr) ~= "string" or c.attr == "" then
        return where .. ".attr: must be a non-empty string"
    end
    if not OPS[c.op] then return where .. ".op: must be one of eq, ne, in" end
    if c.op == "in" then
        if type(c.value) ~= "table" or #c.value == 0 then
            return where .. ".value: must be a non-empty list for op in"
        end
        for _, v in ipairs(c.value) do
            if bad_value(v) then return where .. ".value: must hold strings, numbers or booleans" end
        end
    elseif bad_value(c.value) then
        return where .. ".value: must be a string, number or boolean"
    end
    return nil
end

local function validate_version(v, where, models)
    if type(v) ~= "table" then return where .. ": must be an object" end
    if type(v.model) ~= "string" or not models[v.model] then
        return where .. ".model: names no model of the snapshot"
    end
    local p = v.percent
    if type(p) ~= "number" or floor(p) ~= p or p < 0 or p > 100 then
        return where .. ".percent: must be an integer in 0..100"
    end
    local conds = v.conditions
    if conds ~= nil and conds ~= json_null then
        if type(conds) ~= "table" then return where .. ".conditions: must be a list" end
        for i, c in ipairs(conds) do
            local err = validate_condition(c, where .. ".conditions[" .. i .. "]")
            if err then return err end
        end
        return nil, #conds > 0
    end
    return nil, false
end

-- Returns nil, or a message naming the first bad field (config.validate).
function _M.validate(routes, models)
    if routes == nil then
        return nil
    end
    if type(routes) ~= "table" then return "routes: must be an object" end
    for name, r in pairs(routes) do
        local where = "routes." .. tostring(name)
        if type(name) ~= "string" then return "routes: must be an object" end
        if type(r) ~= "table" then return where .. ": must be an object" end
        if r.sticky ~= nil and type(r.sticky) ~= "boolean" then
            return where .. ".sticky: must be a boolean"
        end
        if type(r.versions) ~= "table" then return where .. ".versions: must be a list" end
        local split = 0
        for i, v in ipairs(r.versions) do
            local err, conditional = validate_version(v, where .. ".versions[" .. i .. "]",
                                                      models)
            if err then return err end
            if not conditional then split = split + v.percent end
        end
        if split == 0 then
            return where .. ".versions: the unconditioned versions' percents must add up to more than 0"
        end
    end
    return nil
end

local function compile_conditions(conds)
    local out = {}
    for i, c in ipairs(conds) do
        local value = c.value
        if c.op == "in" then
            value = {}
            for _, v in ipairs(c.value) do value[v] = true end
        end
        out[i] = { attr = c.attr, op = c.op, value = value }
    end
    return out
end

-- -> { [name] = { name, sticky, cond = { {model, threshold, salt, conditions} },
--                 split = { {model, upto} }, units } }; thresholds in 1/100 %.
function _M.compile(routes)
    local out = {}
    for name, r in pairs(routes or {}) do
        local cond, split, units = {}, {}, 0
        for i, v in ipairs(r.versions) do
            local conds = v.conditions
            if conds ~= nil and conds ~= json_null and #conds > 0 then
                cond[#cond + 1] = { model = v.model, threshold = v.percent * 100,
                                    salt = "\0" .. i, conditions = compile_conditions(conds) }
            elseif v.percent > 0 then
                units = units + v.percent * 100
                split[#split + 1] = { model = v.model, upto = units }
            end
        end
        out[name] = { name = name, sticky = r.sticky ~= false, cond = cond, split = split,
                      units = units, key = name .. "\0" }
    end
    return out
end

local function matches(conditions, attrs)
    for _, c in ipairs(conditions) do
        local v = attrs[c.attr]
        local op = c.op
        if op == "eq" then
            if v ~= c.value then return false end
        elseif op == "ne" then
            if v == c.value then return false end
        elseif v == nil or not c.value[v] then
            return false
        end
    end
    return true
end

-- A number in 0..units-1: the caller's own (sticky) or a fresh draw.
local function draw(caller, salt, units)
    if not caller then
        return random(0, units - 1)
    end
    return crc32(caller .. salt) % units
end

-- The OpenAI body names the public model; the backend gets the chosen one. Model
-- names hold no JSON escapes but "/" (which some encoders write as "\/"); a body that
-- spells the name otherwise is re-encoded whole.
local function rewrite_body(ctx, from, to)
    local body = ngx_req.get_body_data()
    -- "." is the only regex character a name can hold; "/" may come as "\/"
    local quoted = re_gsub(re_gsub(from, [[\.]], [[\.]], "jo"), "/", [[\\?/]], "jo")
    local new, n = re_sub(body, [["model"\s*:\s*"]] .. quoted .. [["]],
                          '"model":"' .. to .. '"', "o")
    if not n or n == 0 then
        local doc = ctx.body.doc
        doc.model = to
        new = cjson.encode(doc)
        doc.model = from
    end
    if new then
        ngx_req.set_body_data(new)
    end
end

-- The version (target model name) of compiled `route` for a caller with `attrs`.
function _M.pick(route, attrs, consumer)
    local caller
    if route.sticky then
        local sub = attrs.sub
        caller = route.key .. consumer.key_id
        if sub ~= nil then
            caller = caller .. "\0" .. tostring(sub)
        end
    end
    for _, v in ipairs(route.cond) do
        if matches(v.conditions, attrs)
           and (v.threshold >= 10000 or draw(caller, v.salt, 10000) < v.threshold) then
            return v.model
        end
    end
    local n = draw(caller, "", route.units)
    local split = route.split
    for i = 1, #split do
        if n < split[i].upto then
            return split[i].model
        end
    end
    return split[#split].model   -- not reached: n < units == the last upto
end

-- Access phase, after content policy: the model that serves a request naming
-- `model_name`. Without a route that is `model_name` itself.
function _M.choose(ctx, snap, endpoint, model_name, consumer)
    local route = snap.routes[model_name]
    if not route then
        return model_name
    end
    local target = _M.pick(route, ctx.caller.attributes or consumer.attributes, consumer)
    local aim = ctx.target
    aim.route = route.name
    aim.route_version = target
    metrics.inc("sluice_route_requests_total", 1, route.name, target)
    -- (an upload's form keeps the name asked: it is not rewritten in Lua)
    if target ~= model_name and not endpoint.model_in_path and not endpoint.upload then
        rewrite_body(ctx, model_name, target)
    end
    return target
end

-- Access phase: the request leaves as an async job naming `asked` (the route), not
-- the version chosen above; give the body its model name back.
function _M.unchoose(ctx, endpoint, asked)
    local target = ctx.target.route_version
    if target and target ~= asked and not endpoint.model_in_path and not endpoint.upload then
        rewrite_body(ctx, target, asked)
    end
end

-- header_filter: which version answered, for callers comparing canary and stable.
-- (A probe's plain ngx.ctx has no ctx.target.)
function _M.header(ctx, header)
    local aim = ctx.target
    local target = aim and aim.route_version
    if target then
        header["X-Sluice-Route-Version"] = target
    end
end

return _M
