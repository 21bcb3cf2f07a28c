-- TensorFlow Serving REST backend: `POST /v1/models/{model}:predict` with
-- {"instances": [...]}, answered {"predictions": [...]}; errors {"error": "..."}.
local predict = require("sluice.adapters.predict")

local escape_uri = ngx.escape_uri

local _M = {}

function _M.request(ireq, _, model_name)
    return "/v1/models/" .. escape_uri(model_name) .. ":predict", predict.body(ireq)
end

_M.response = predict.response
_M.error_message = predict.error_message

return _M
