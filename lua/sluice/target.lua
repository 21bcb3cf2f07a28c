-- From a matched endpoint (sluice.endpoints) to a model and a pool of its backends.
-- A model may have backends of several protocols: the pool that speaks the caller's
-- protocol natively wins; else the first pool in the model's `pool_order`.
local cjson = require("cjson.safe")
local pii = require("sluice.pii")
local body_rules = require("sluice.body")

local ngx = ngx
local ngx_req = ngx.req
local re_find = ngx.re.find
local type = type
local shape_error = body_rules.shape_error
local ascii = require("sluice.bytes").ascii
local needs_doc = body_rules.needs_doc
local upload = require("sluice.upload")
local spread = require("sluice.spread")

local REALTIME = "openai_realtime"   -- the pool of sluice.realtime's backends

local _M = {}

-- The request body, read and checked without decoding it (valid UTF-8, shaped like a
-- JSON object: sluice.body): returns it, or nil, status, type, message.
local function read_body(ctx)
    ngx_req.read_body()
    local body = ngx_req.get_body_data()
    if not body then
        if ngx_req.get_body_file() then
            -- client_body_buffer_size == client_max_body_size keeps bodies in memory
            return nil, 500, "internal_error", "request body was buffered to disk"
        end
        return nil, 400, "invalid_request", "request body is required"
    end
    -- All ASCII is valid UTF-8; else the "u" flag makes PCRE validate the subject as
    -- UTF-8 and fail on bad bytes.
    if not ascii(body) then
        local _, _, err = re_find(body, "^", "ujo")
        if err then
            return nil, 400, "invalid_request", "request body is not valid UTF-8"
        end
    end
    pii.excerpt(ctx, body)
    local bad = shape_error(body)
    if bad then
        return nil, 400, "invalid_request", bad
    end
    return body
end

-- The decoded body (a table), or nil, status, type, message.
local function decode(body)
    local doc, derr = cjson.decode(body)
    if type(doc) ~= "table" then
        return nil, 400, "invalid_request", "request body is not valid JSON: " .. (derr or "")
    end
    return doc
end

-- Access step: the model a request names and its decoded body. Returns status, type,
-- message on failure; else nil, nil, nil, nil, model name, body. A path-named model's
-- body is decoded only when a step reads it (sluice.body says when): the body is nil
-- otherwise. The unified envelope may name
-- a `model_type` instead of a `model` (brief 000): the snapshot's `model_types` map
-- says which model or route serves it; `model`, when present, wins.
-- Sets ctx.body.len, and ctx.body.doc when decoded (an upload: ctx.body.form).
function _M.model_name(ctx, endpoint, path_model, snap)
    if endpoint.upload then   -- multipart: its head only (sluice.upload); sets ctx.body.form
        local status, err_type, msg, extra, name, size, form = upload.read(endpoint, snap)
        if status then
            return status, err_type, msg, extra
        end
        local body = ctx.body
        body.len, body.form = size, form
        return nil, nil, nil, nil, name, nil
    end
    local body, status, err_type, msg = read_body(ctx)
    if not body then
        return status, err_type, msg
    end
    local kept = ctx.body
    kept.len = #body
    if endpoint.model_in_path and not needs_doc(snap, endpoint, path_model) then
        return nil, nil, nil, nil, path_model, nil   -- forwarded as it came
    end
    local doc
    doc, status, err_type, msg = decode(body)
    if not doc then
        return status, err_type, msg
    end
    -- kept for later steps (token reservation) so the body is decoded once
    kept.doc = doc
    if endpoint.model_in_path then
        return nil, nil, nil, nil, path_model, doc
    end
    local name = doc.model
    if name == nil and endpoint.name == "unified" then
        local mtype = doc.model_type
        if type(mtype) ~= "string" or mtype == "" then
            return 400, "invalid_request",
                   'the envelope needs "model" or "model_type" (a non-empty string)'
        end
        name = snap.model_types and snap.model_types[mtype]
        if not name then
            return 404, "not_found", "no model serves model_type " .. mtype
        end
        return nil, nil, nil, nil, name, doc
    end
    if type(name) ~= "string" or name == "" then
        return 400, "invalid_request", 'field "model" must be a non-empty string'
    end
    return nil, nil, nil, nil, name, doc
end

-- Access step: the pool of backends that serve `model` for `endpoint`. Returns
-- status, type, message on failure; else nil, nil, nil, nil, pool, model.
function _M.pool(snap, endpoint, model_name)
    local model = snap.models[model_name]
    if not model then
        return 404, "not_found", "unknown model " .. model_name
    end
    local pool
    -- audio and images (and the envelope's asr/, tts/): vendors by weight
    if (endpoint.task or endpoint.caller == "unified" and model.media_tasks)
       and model.pool_order[2] then
        pool = spread.pool(model, endpoint)
    else
        pool = endpoint.native and model.pools[endpoint.native]
    end
    if not pool then
        local order = model.pool_order
        for i = 1, #order do
            -- realtime backends take only WebSocket sessions (sluice.realtime)
            if order[i] ~= REALTIME then
                pool = model.pools[order[i]]
                break
            end
        end
    end
    if not pool then
        if model.pools[REALTIME] then
            return 400, "invalid_request", "model " .. model_name .. " takes only realtime "
                   .. "sessions (GET /v1/realtime)", { param = "model" }
        end
        return 503, "backend_unavailable", "model " .. model_name .. " has no backend"
    end
    return nil, nil, nil, nil, pool, model
end

return _M
