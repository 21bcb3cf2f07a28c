-- Vendor mappings in the snapshot ("mappings": {name: mapping}; docs/contracts.md):
-- validated with the snapshot, compiled once per snapshot for adapters/vendor.lua.
local media_mapping = require("sluice.media_mapping")   -- audio and image fields

local type = type
local pairs = pairs
local tostring = tostring
local str_find = string.find
local str_match = string.match

local _M = {}

local function is_pointer(p)
    return type(p) == "string" and (p == "" or p:sub(1, 1) == "/")
end

-- Does the request template use {{inputs}} (the whole batch) anywhere?
local function uses_batch(node)
    if type(node) == "string" then
        return str_match(node, "^{{%s*inputs%s*}}$") ~= nil
    end
    if type(node) == "table" then
        for _, v in pairs(node) do
            if uses_batch(v) then return true end
        end
    end
    return false
end

-- Returns nil, or a message naming the first bad field.
function _M.validate(mappings)
    if mappings == nil then
        return nil
    end
    if type(mappings) ~= "table" then
        return "mappings: must be an object"
    end
    for name, m in pairs(mappings) do
        local where = "mappings." .. tostring(name)
        if type(name) ~= "string" then return "mappings: must be an object" end
        if type(m) ~= "table" then return where .. ": must be an object" end
        if type(m.path) ~= "string" or m.path:sub(1, 1) ~= "/" or str_find(m.path, "%s") then
            return where .. ".path: must be a path starting with /"
        end
        if type(m.request) ~= "table" then return where .. ".request: must be an object" end
        if type(m.response) ~= "table" then return where .. ".response: must be an object" end
        if not is_pointer(m.response.output) then
            return where .. ".response.output: must be a JSON pointer"
        end
        if m.response.error ~= nil and not is_pointer(m.response.error) then
            return where .. ".response.error: must be a JSON pointer"
        end
        local merr = media_mapping.validate(m, where)
        if merr then return merr end
    end
    return nil
end

function _M.compile(mappings)
    local out = {}
    for name, m in pairs(mappings or {}) do
        out[name] = media_mapping.compile(m, {
            name = name, path = m.path, request = m.request,
            output = m.response.output, error = m.response.error,
            batch = uses_batch(m.request) })
    end
    return out
end

return _M
