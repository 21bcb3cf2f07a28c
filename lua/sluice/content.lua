-- Content policies: term lists, global or per model. A request whose body holds a
-- term (case-insensitive substring of any string value, keys included, ASCII case
-- folding) is refused with 451 naming the policy, never the matched text.
local cjson = require("cjson.safe")

local type = type
local pairs = pairs
local ipairs = ipairs
local tostring = tostring
local str_find = string.find
local str_lower = string.lower

local json_null = cjson.null

local MAX_DEPTH = 16     -- deeper JSON is not searched further (and is not text)

local _M = {}

-- Returns nil or a message naming the first bad field (config.validate).
function _M.validate(list)
    if list == nil then
        return nil
    end
    if type(list) ~= "table" then
        return "content_policies: must be a list"
    end
    for i, p in ipairs(list) do
        local where = "content_policies[" .. i .. "]"
        if type(p) ~= "table" or type(p.name) ~= "string" then
            return where .. ".name: must be a string"
        end
        if p.model ~= nil and p.model ~= json_null and type(p.model) ~= "string" then
            return where .. ".model: must be a model name or null"
        end
        if type(p.terms) ~= "table" then
            return where .. ".terms: must be a list of strings"
        end
        for _, t in ipairs(p.terms) do
            if type(t) ~= "string" or t == "" then
                return where .. ".terms: must be a list of non-empty strings"
            end
        end
    end
    return nil
end

-- -> { global = { {name, terms} ... }, models = { [model] = { ... } } }
function _M.compile(list)
    local out = { global = {}, models = {} }
    if type(list) ~= "table" then
        return out
    end
    for _, p in ipairs(list) do
        local terms = {}
        for i, t in ipairs(p.terms) do
            terms[i] = str_lower(t)
        end
        local entry = { name = p.name, terms = terms }
        local bucket = out.global
        if p.model ~= nil and p.model ~= json_null then
            bucket = out.models[p.model]
            if not bucket then
                bucket = {}
                out.models[p.model] = bucket
            end
        end
        bucket[#bucket + 1] = entry
    end
    return out
end

local function hit(s, policies)
    s = str_lower(s)
    for _, p in ipairs(policies) do
        for _, t in ipairs(p.terms) do
            if str_find(s, t, 1, true) then
                return p.name
            end
        end
    end
    return nil
end

local function scan(v, policies, depth)
    local t = type(v)
    if t == "string" then
        return hit(v, policies)
    end
    if t ~= "table" or depth > MAX_DEPTH then
        return nil
    end
    for k, x in pairs(v) do
        local name = (type(k) == "string" and hit(k, policies)) or scan(x, policies, depth + 1)
        if name then
            return name
        end
    end
    return nil
end

-- Access phase: the name of the first policy `doc` violates, or nil.
function _M.check(snap, model_name, doc)
    local cp = snap.content
    if doc == nil or (cp.global[1] == nil and cp.models[model_name] == nil) then
        return nil
    end
    local name = cp.global[1] and scan(doc, cp.global, 1)
    if not name and cp.models[model_name] then
        name = scan(doc, cp.models[model_name], 1)
    end
    return name and tostring(name) or nil
end

return _M
