-- Audio and image requests to a backend of another protocol than OpenAI's: through
-- a vendor mapping's `media` section (sluice.mappings), else refused with a 400
-- naming the model.
local _M = {}

-- Access step (sluice.convert.prepare). Returns status, type, message, extra on
-- failure; else nil, nil, nil, nil and the backend path.
function _M.prepare(_, endpoint, model_name, pool)
    return 400, "invalid_request_error", "model " .. model_name .. " cannot serve "
           .. endpoint.path .. " (its backends speak " .. pool.protocol .. ")",
           { param = "model" }
end

return _M
