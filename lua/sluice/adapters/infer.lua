-- Caller side of `POST /api/v1/model/{model}/infer`:
--   {"input": <item or list>, "params": {"max_length": 50, "temperature": 0.7}}
-- answered {"model": ..., "output": <item or list, as the input was>, "usage": ...}
local common = require("sluice.adapters.common")

local type = type

local _M = {}

function _M.decode(endpoint, doc, model)
    if doc.input == nil then
        return nil, 'field "input" is required'
    end
    if doc.params ~= nil and type(doc.params) ~= "table" then
        return nil, 'field "params" must be an object'
    end
    local list = common.is_list(doc.input)
    return { kind = endpoint.kind, model = model,
             inputs = list and doc.input or { doc.input },
             params = doc.params or {}, meta = { list = list } }
end

function _M.respond(ireq, ires)
    return { model = ireq.model,
             output = ireq.meta.list and ires.outputs or ires.outputs[1],
             usage = ires.usage }
end

return _M
