-- Endpoints of the public API (skeleton):
--   POST /v1/chat/completions        model from the JSON body, "openai" backends
--   POST /v1/models/{model}/predict  model from the path,      "predict" backends
local cjson = require("cjson.safe")

local ngx = ngx
local ngx_var = ngx.var
local ngx_req = ngx.req
local re_find = ngx.re.find
local re_match = ngx.re.match
local escape_uri = ngx.escape_uri
local type = type

local _M = {}

local ENDPOINT_CHAT = { name = "chat", protocol = "openai" }
local ENDPOINT_PREDICT = { name = "predict", protocol = "predict" }

-- Which endpoint a request is for. Returns endpoint, model-from-path (or nil);
-- or nil, status, type, message. (`uri` is percent-decoded and normalised by nginx.)
function _M.match()
    local uri = ngx_var.uri
    local endpoint, model
    if uri == "/v1/chat/completions" then
        endpoint = ENDPOINT_CHAT
    else
        local m = re_match(uri, [[^/v1/models/([^/]+)/predict\z]], "jo")
        if not m then
            return nil, 404, "not_found", "no endpoint at " .. uri
        end
        endpoint, model = ENDPOINT_PREDICT, m[1]
    end
    if ngx_req.get_method() ~= "POST" then
        return nil, 405, "method_not_allowed", uri .. " only accepts POST"
    end
    return endpoint, model
end

-- The request body as a JSON object: returns the raw body and its decoded table,
-- or nil, status, type, message.
local function json_body()
    ngx_req.read_body()
    local body = ngx_req.get_body_data()
    if not body then
        if ngx_req.get_body_file() then
            -- client_body_buffer_size == client_max_body_size keeps bodies in memory
            return nil, 500, "internal_error", "request body was buffered to disk"
        end
        return nil, 400, "invalid_request", "request body is required"
    end
    -- The "u" flag makes PCRE validate the subject as UTF-8 and fail on bad bytes.
    local _, _, err = re_find(body, "^", "ujo")
    if err then
        return nil, 400, "invalid_request", "request body is not valid UTF-8"
    end
    if not re_find(body, [[^\s*\{]], "jo") then
        return nil, 400, "invalid_request", "request body must be a JSON object"
    end
    local doc, derr = cjson.decode(body)
    if type(doc) ~= "table" then
        return nil, 400, "invalid_request", "request body is not valid JSON: " .. (derr or "")
    end
    return body, doc
end

-- The model a request names. Returns model name, or nil, status, type, message.
function _M.model_name(endpoint, path_model)
    local body, doc, err_type, msg = json_body()
    if not body then
        return nil, doc, err_type, msg
    end
    -- kept for later steps (token reservation) so the body is decoded once
    local ctx = ngx.ctx
    ctx.request_doc, ctx.request_len = doc, #body
    if endpoint == ENDPOINT_PREDICT then
        return path_model
    end
    local name = doc.model
    if type(name) ~= "string" or name == "" then
        return nil, 400, "invalid_request", 'field "model" must be a non-empty string'
    end
    return name
end

-- The path the backend gets (before its base_path): rebuilt from what was matched,
-- so "/v1/x/../chat/completions" and friends reach the backend in canonical form.
function _M.upstream_path(endpoint, model_name)
    local path = endpoint == ENDPOINT_PREDICT
                 and "/v1/models/" .. escape_uri(model_name) .. "/predict"
                 or "/v1/chat/completions"
    local args = ngx_var.args
    if args and args ~= "" then
        return path .. "?" .. args
    end
    return path
end

-- The pool of backends that serve `model` for `endpoint`, or nil, status, type, message.
function _M.pool(snap, endpoint, model_name)
    local model = snap.models[model_name]
    if not model then
        return nil, 404, "not_found", "unknown model " .. model_name
    end
    local pool = model.pools[endpoint.protocol]
    if not pool then
        return nil, 400, "invalid_request", "model " .. model_name .. " has no backend for the "
               .. endpoint.protocol .. " protocol; use the endpoint its backends speak"
    end
    return pool, model
end

return _M
