-- GET /v1/models and GET /v1/models/{model} in OpenAI's shape: only the models (and
-- routes) the caller's key may use (a model it may not use is as unknown as a missing one).
local cjson = require("cjson.safe")
local auth = require("sluice.auth")
local errors = require("sluice.errors")

local ngx = ngx
local ngx_header = ngx.header
local ngx_print = ngx.print
local ngx_exit = ngx.exit
local pairs = pairs
local ipairs = ipairs
local sort = table.sort
local concat = table.concat

local OWNER = "sluice"

local _M = {}

local function entry(name)
    return cjson.encode({ id = name, object = "model", created = 0, owned_by = OWNER })
end

function _M.serve(snap, consumer, model_name)
    local body
    if model_name then
        if not (snap.models[model_name] or snap.routes[model_name])
           or not auth.allowed(consumer, model_name) then
            return errors.exit(404, "not_found", "unknown model " .. model_name)
        end
        body = entry(model_name)
    else
        local names = {}
        for name in pairs(snap.models) do
            if auth.allowed(consumer, name) then
                names[#names + 1] = name
            end
        end
        -- a route's name is a model to the caller (sluice.routes)
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
    ngx.status = 200
    ngx_header["Content-Type"] = "application/json"
    ngx_print(body, "\n")
    return ngx_exit(200)
end

return _M
