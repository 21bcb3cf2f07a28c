-- The unified envelope, caller side:
--   POST /v1/predict {"api_version": "1.0", "model_type": "cv/ocr", "model": "...",
--                     "params": {"input": [...], "threshold": 0.5}, "request_id": "<uuid4>"}
-- answered
--   {"api_version": "1.0", "request_id": ..., "model": ..., "model_type": ...,
--    "outputs": [...], "usage": {...}}
local common = require("sluice.adapters.common")

local type = type
local pairs = pairs

local API_VERSION = "1.0"

local _M = {}

function _M.decode(endpoint, doc, model)
    if doc.api_version ~= API_VERSION then
        return nil, 'field "api_version" must be "' .. API_VERSION .. '"'
    end
    local params = doc.params
    if type(params) ~= "table" or params.input == nil then
        return nil, 'field "params" must be an object with "input"'
    end
    if doc.request_id ~= nil and type(doc.request_id) ~= "string" then
        return nil, 'field "request_id" must be a string'
    end
    if doc.model_type ~= nil and type(doc.model_type) ~= "string" then
        return nil, 'field "model_type" must be a string'
    end
    local rest = {}
    for k, v in pairs(params) do
        if k ~= "input" then rest[k] = v end
    end
    return { kind = endpoint.kind, model = model, inputs = common.as_list(params.input),
             params = rest,
             meta = { request_id = doc.request_id, model_type = doc.model_type } }
end

function _M.respond(ireq, ires)
    return { api_version = API_VERSION, request_id = ireq.meta.request_id,
             model = ireq.model, model_type = ireq.meta.model_type,
             outputs = ires.outputs, usage = ires.usage }
end

return _M
