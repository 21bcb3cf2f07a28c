-- Vendor backends described by data, not code: a mapping from the snapshot
-- (docs/contracts.md, "mappings") says where to POST, how to build the body and
-- where the answer and errors are:
--   {"path": "/generate",
--    "request": {"text": "{{input}}", "opts": {"lang": "cn", "t": "{{params.temperature}}"}},
--    "response": {"output": "/result/text", "error": "/err/msg"}}
-- A string that is exactly a placeholder is replaced by the value (type kept):
-- {{input}} the one input, {{inputs}} all inputs (then "output" points at a list),
-- {{model}} the model name, {{params.NAME}} a parameter (the key is dropped when the
-- caller did not send it). Other strings are copied as they are.
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")

local type = type
local pairs = pairs
local str_match = string.match

local json_null = cjson.null

local _M = {}

local function fill(node, values, params)
    if type(node) == "string" then
        local name = str_match(node, "^{{%s*([%w_.]+)%s*}}$")
        if not name then
            return node
        end
        local pname = str_match(name, "^params%.([%w_]+)$")
        if pname then
            return params[pname]   -- nil: the key is dropped
        end
        local v = values[name]
        if v == nil then
            return node
        end
        return v
    end
    if type(node) ~= "table" or node == json_null then
        return node
    end
    local out = {}
    for k, v in pairs(node) do
        out[k] = fill(v, values, params)
    end
    return out
end

function _M.request(ireq, pool, model_name)
    local mapping = pool.mapping
    if ireq.kind == "embedding" then
        return nil, "model " .. model_name .. " cannot compute embeddings"
    end
    if not mapping.batch and #ireq.inputs ~= 1 then
        return nil, "model " .. model_name .. " takes one input per request"
    end
    local values = { input = ireq.inputs[1], inputs = ireq.inputs, model = model_name }
    return mapping.path, fill(mapping.request, values, ireq.params)
end

function _M.response(doc, _, pool)
    local mapping = pool.mapping
    local out = common.pointer(doc, mapping.output)
    if out == nil then
        return nil, "answer has nothing at " .. mapping.output
    end
    if mapping.batch then
        if not common.is_list(out) then
            return nil, "answer at " .. mapping.output .. " is not a list"
        end
        return { outputs = out }
    end
    return { outputs = { out } }
end

function _M.error_message(doc, pool)
    local ptr = pool.mapping.error
    local msg = ptr and common.pointer(doc, ptr)
    if msg == nil then
        return nil
    end
    return common.text(msg)
end

return _M
