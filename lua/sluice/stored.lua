-- GET, DELETE /v1/responses/{id}, GET …/input_items, POST …/cancel: a response kept by
-- a backend that speaks the Responses API natively (protocol openai_responses), read
-- back, deleted, listed or cancelled through it unchanged. The path
-- names no model, so the model is the `model` query parameter when given, else the
-- only model the key may use whose backends speak Responses; else a 400 naming
-- `model`. A converted backend keeps no responses (adapters/responses.lua answers
-- store: false), so no other model is asked.
local auth = require("sluice.auth")

local ngx = ngx
local ngx_var = ngx.var
local unescape_uri = ngx.unescape_uri
local pairs = pairs

local PROTOCOL = "openai_responses"

local _M = {}

local function keeps(model)
    return model ~= nil and model.pools[PROTOCOL] ~= nil
end

-- Access step: the model to read a kept response through. Returns status, type,
-- message, extra on failure; else nil, nil, nil, nil and the model name.
function _M.model(snap, consumer)
    local name = ngx_var.arg_model
    if name then
        name = unescape_uri(name)
        if not auth.allowed(consumer, name) or not snap.models[name] then
            return 404, "not_found", "unknown model " .. name
        end
        if not keeps(snap.models[name]) then
            return 400, "invalid_request_error", "model " .. name .. " keeps no responses:"
                   .. " its backends do not speak the Responses API", { param = "model" }
        end
        return nil, nil, nil, nil, name
    end
    local found
    for n, model in pairs(snap.models) do
        if keeps(model) and auth.allowed(consumer, n) then
            if found then
                return 400, "invalid_request_error", "several models keep responses:"
                       .. " name one with ?model=", { param = "model" }
            end
            found = n
        end
    end
    if not found then
        return 404, "not_found", "no model this key may use keeps responses"
    end
    return nil, nil, nil, nil, found
end

return _M
