-- GET /v1/models and GET /v1/models/{model} in OpenAI's shape: only the models (and
-- routes) the caller's key may use (a model it may not use is as unknown as a missing one).
local cjson = require("cjson.safe")
local auth = require("sluice.auth")

local pairs = pairs
local ipairs = ipairs
local sort = table.sort
local concat = table.concat

local OWNER = "sluice"

local _M = {}

local function entry(name)
    return cjson.encode({ id = name, object = "model", created = 0, owned_by = OWNER })
end

-- The answer: 200, content type, body; or 404, type, message.
function _M.serve(snap, consumer, model_name)
    local body
    if model_name then
        if not (snap.models[model_name] or snap.routes[model_name])
           or not auth.allowed(consumer, model_name) then
            return 404, "not_found", "unknown model " .. model_name
        end
        body = entry(model_name)
    else
        local names = {}
        for name in pairs(snap.models) do
            if auth.allowed(consumer, name) then
                names[#names + 1] = name
            end
        end
        -- a route's name is a model to the caller (sluice.splits)
        for name in pairs(snap.routes) do
            if not snap.models[name] and auth.allowed(consumer, name) then
                names[#names + 1] = name
            end
        end
        sort(names)
        for i, name in ipairs(names) do
            names[i] = entry(name)
        end
        -- by hand: cjson would write an empty list as {}
        body = '{"object":"list","data":[' .. concat(names, ",") .. ']}'
    end
    return 200, "application/json", body .. "\n"
end

return _M
