-- KServe v1 style `POST /v1/models/{model}/predict`: {"instances": [...]} answered
-- {"predictions": [...]}. Caller side and backend side ("predict" protocol).
-- TensorFlow Serving speaks the same bodies on another path (adapters/tfserving.lua).
local common = require("sluice.adapters.common")

local escape_uri = ngx.escape_uri
local type = type

local _M = {}

-- ---- caller side ----------------------------------------------------------------

function _M.decode(endpoint, doc, model)
    local inputs = doc.instances
    if inputs == nil then
        inputs = doc.inputs
    end
    if inputs == nil then
        inputs = doc.input
    end
    if inputs == nil then
        return nil, 'body needs "instances" (a list)'
    end
    return { kind = endpoint.kind, model = model, inputs = common.as_list(inputs),
             params = type(doc.parameters) == "table" and doc.parameters or {}, meta = {} }
end

function _M.respond(ireq, ires)
    return { model = ireq.model, predictions = ires.outputs }
end

-- ---- backend side ---------------------------------------------------------------

function _M.body(ireq)
    return { instances = ireq.inputs }
end

function _M.request(ireq, _, model_name)
    return "/v1/models/" .. escape_uri(model_name) .. "/predict", _M.body(ireq)
end

function _M.response(doc)
    local p = doc.predictions
    if not common.is_list(p) then
        return nil, 'answer has no "predictions" list'
    end
    return { outputs = p }
end

function _M.error_message(doc)
    local e = doc.error
    if type(e) == "string" then
        return e
    end
    if type(e) == "table" and type(e.message) == "string" then
        return e.message
    end
    return nil
end

return _M
