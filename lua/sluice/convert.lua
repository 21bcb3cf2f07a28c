-- Protocol conversion between the caller's endpoint and the chosen backend.
--
--   access:        caller body --decode--> internal request --request--> backend body
--   header_filter: status and headers of the converted answer (Content-Length goes)
--   body_filter:   backend body (buffered, bounded) --response--> internal response
--                  --respond--> caller body; streams frame by frame (adapters/sse.lua)
--
-- A caller whose endpoint the backend speaks natively (OpenAI to OpenAI, KServe v2 to
-- KServe v2, v1 predict to "predict") is proxied unchanged: no decode, no buffering;
-- only a backend's own error answer (3xx, 4xx, 5xx: nginx intercepts none of them,
-- its error page takes only its own errors) is read, bounded, and rewritten into
-- the error template, the start of the backend's body kept for the log line.
--
-- A whole answer is converted inside the subrequest of lua/sluice/relay.lua, so its
-- status goes out after the conversion: conv.failed (the reason) makes it a 502.
local cjson = require("cjson.safe")
local errors = require("sluice.errors")
local sse = require("sluice.adapters.sse")
local media_convert = require("sluice.media_convert")
local media_envelope = require("sluice.media_envelope")
local stream = require("sluice.adapters.stream")
local carry = require("sluice.carry")

local ngx = ngx
local ngx_req = ngx.req
local ngx_header = ngx.header
local ngx_log = ngx.log
local ERR = ngx.ERR
local escape_uri = ngx.escape_uri
local type = type
local tonumber = tonumber
local concat = table.concat

local MAX_BUFFER = 16 * 1024 * 1024   -- bytes of a backend answer we convert whole
local MAX_ERROR_BODY = 64 * 1024      -- bytes of a backend error body we read
local ERROR_EXCERPT = 512             -- bytes of it kept for the log ("upstream_error")

local CALLERS = {
    openai = require("sluice.adapters.openai"),
    unified = require("sluice.adapters.unified"),
    infer = require("sluice.adapters.infer"),
    predict = require("sluice.adapters.predict"),
    kserve_v2 = require("sluice.adapters.kserve_v2"),
    responses = require("sluice.adapters.responses"),
    anthropic = require("sluice.adapters.anthropic"),
}

local BACKENDS = {
    openai = CALLERS.openai,
    predict = CALLERS.predict,
    kserve_v2 = CALLERS.kserve_v2,
    tfserving = require("sluice.adapters.tfserving"),
    vendor = require("sluice.adapters.vendor"),
    openai_responses = require("sluice.adapters.responses_backend"),
    anthropic = CALLERS.anthropic,
    gemini = require("sluice.adapters.gemini"),
}

-- Backend 4xx on a converted pair -> what the caller gets. The caller's key is fine
-- (the gateway checked it), so the backend refusing ours is the gateway's problem.
local BACKEND_4XX = { [400] = 400, [413] = 413, [422] = 400, [429] = 429 }
-- Backend 5xx, any pair: DESIGN.md's statuses (unavailable, timeout; else 502)
local BACKEND_5XX = { [503] = 503, [504] = 504 }

local _M = {}

function _M.native_path(endpoint, model_name)
    if endpoint.path then return endpoint.path end   -- audio, images
    local name = endpoint.name
    if name == "chat" then return "/v1/chat/completions" end
    if name == "completions" then return "/v1/completions" end
    if name == "embeddings" then return "/v1/embeddings" end
    if name == "messages" then return "/v1/messages" end
    if name == "responses" then return "/v1/responses" end
    if endpoint.stored then return ngx.var.uri end   -- a kept response's: [A-Za-z0-9_/-]
    if name == "v2_infer" then return "/v2/models/" .. escape_uri(model_name) .. "/infer" end
    return "/v1/models/" .. escape_uri(model_name) .. "/predict"
end

-- Access step. Returns status, type, message on failure; else nil, nil, nil, nil and
-- the backend path (without query).
function _M.prepare(ctx, endpoint, doc, model_name, pool)
    local protocol = pool.protocol
    if endpoint.native == protocol then
        if protocol == "anthropic" then
            BACKENDS.anthropic.headers()
        end
        return nil, nil, nil, nil, _M.native_path(endpoint, model_name)
    end
    if endpoint.kind == "media" then   -- audio and images to another protocol
        return media_convert.prepare(ctx, endpoint, doc, model_name, pool, BACKENDS.vendor)
    end
    local model = ctx.target.model
    if endpoint.caller == "unified" and model and model.media_tasks then   -- asr/, tts/
        return media_envelope.prepare(ctx, endpoint, doc, model, model_name, pool,
                                      BACKENDS[protocol])
    end
    if endpoint.kind == "embedding" and protocol ~= "openai" then
        return 400, "invalid_request", "model " .. model_name
               .. " cannot compute embeddings (its backends speak " .. protocol .. ")"
    end
    -- OpenAI's error type for OpenAI callers; `param` when a field is to blame
    local invalid = endpoint.caller == "openai" and "invalid_request_error" or "invalid_request"
    local param, why = carry.check(endpoint, doc, protocol, model_name)
    if param then
        return 400, invalid, why, { param = param }
    end
    local caller = CALLERS[endpoint.api or endpoint.caller]
    local ireq, err
    ireq, err, param = caller.decode(endpoint, doc, model_name)
    if not ireq then
        return 400, invalid, err, param and { param = param }
    end
    ireq.max_output = model and model.max_output_tokens   -- max_tokens when none is asked
    local backend = BACKENDS[protocol]
    local path, body
    path, body, param = backend.request(ireq, pool, model_name)
    if not path then
        if param and caller.own_param then   -- the caller's name for the field
            param, body = caller.own_param(param, body, ireq)
        end
        return 400, invalid, body, param and { param = param }
    end
    local raw, eerr = cjson.encode(body)
    if not raw then
        return 500, "internal_error", "failed to encode the backend request: " .. eerr
    end
    ngx_req.set_body_data(raw)
    ngx_req.set_header("Content-Type", "application/json")
    ngx_req.clear_header("Accept-Encoding")   -- we must read what comes back
    ctx.conv = {
        ireq = ireq, caller = caller, backend = backend, pool = pool,
        frames = backend.streams ~= nil and backend.streams(ireq) or false,
        sse = ireq.stream == true,
    }
    return nil, nil, nil, nil, path
end

-- A backend's own non-2xx answer on a pair proxied unchanged: from now on it is
-- converted like any answer, into the error template (sets ctx.conv). 4xx kept,
-- 3xx a 502, 5xx as BACKEND_5XX; an OpenAI (chat or Responses) backend's `type`,
-- `param` and `code` kept for an OpenAI caller.
local function native_error(ctx, status)
    local pool = ctx.backend.pool
    local backend = BACKENDS[pool.protocol]
    ctx.conv = { error = status, native = true, backend = backend, pool = pool,
                 openai = backend == CALLERS.openai or backend == BACKENDS.openai_responses }
    if status < 400 then
        ngx.status = 502
        ngx_header["Location"] = nil
    elseif status >= 500 then
        ngx.status = BACKEND_5XX[status] or 502
    end
end

-- Header filter. A converted answer, or a backend's error on a native pair: status
-- and headers. Costs one comparison on a native 2xx.
function _M.header_filter(ctx)
    local conv = ctx.conv
    local status
    if not conv then
        -- a pool: a backend answered; ctx.error_type: the error page's own answer (a
        -- probe's plain ngx.ctx has no ctx.backend)
        local held = ctx.backend
        if not held or not held.pool or ctx.error_type then
            return
        end
        status = ngx.status
        if status < 300 then
            return
        end
        native_error(ctx, status)
        conv = ctx.conv
    else
        status = ngx.status
    end
    if status >= 400 and not conv.native then
        conv.error = status
        ngx.status = (status < 500 and BACKEND_4XX or BACKEND_5XX)[status] or 502
    end
    if conv.error then
        conv.retry_after = tonumber(ngx_header["Retry-After"])
        ngx_header["Content-Type"] = "application/json"
        ngx_header["Content-Encoding"] = nil
    elseif conv.media then   -- audio, images (sluice.media_convert)
        ngx_header["Content-Type"] = media_convert.content_type(conv)
    elseif conv.sse then
        ngx_header["Content-Type"] = "text/event-stream; charset=utf-8"
        ngx_header["Cache-Control"] = "no-cache"
    else
        ngx_header["Content-Type"] = "application/json"
    end
    ngx_header["Content-Length"] = nil
end

-- The error body for a conversion failure. A whole answer is converted in a
-- subrequest (lua/sluice/relay.lua), so the caller gets a real 502 (conv.failed
-- holds the reason); a stream converted frame by frame has sent its 200 already and
-- gets this body (SSE: as an error event).
local function failure(msg)
    ngx_log(ERR, "cannot convert the backend answer: ", msg)
    return errors.body(502, "backend_error", "cannot convert the backend answer: " .. msg)
end

-- The error template for a backend's error answer `doc` (decoded, or not a table).
local function error_body(ctx, conv, doc)
    local status = ngx.status
    local err_type, extra = errors.type_for(status), nil
    local msg = type(doc) == "table" and conv.backend.error_message(doc, conv.pool) or nil
    if conv.retry_after then
        extra = { retry_after = conv.retry_after }
    end
    if conv.openai then
        -- OpenAI's fields, so an OpenAI client reads what the backend meant; `code`
        -- stays the status (the template's), the backend's own code is `backend_code`
        local e = type(doc) == "table" and doc.error
        extra = extra or {}
        extra.param = cjson.null
        if type(e) == "table" then
            if type(e.type) == "string" then err_type = e.type end
            if type(e.param) == "string" then extra.param = e.param end
            if type(e.code) == "string" then extra.backend_code = e.code end
        end
    end
    errors.note(ctx, err_type)
    local verb = conv.error < 400 and "answered a redirect (" or conv.error < 500
                 and "refused the request (" or "failed ("
    return errors.body(status, err_type, "the backend " .. verb .. conv.error .. ")"
                       .. (msg and ": " .. msg or ""), extra) .. "\n"
end

local function finish(conv, raw)
    if conv.media then
        local body, err = media_convert.finish(conv, raw)
        if not body then
            conv.failed = err
            return failure(err) .. "\n"
        end
        return body
    end
    local ireq, backend = conv.ireq, conv.backend
    local doc = cjson.decode(raw)
    local ires, err
    if type(doc) == "table" then
        ires, err = backend.response(doc, ireq, conv.pool)
    else
        err = "answer is not a JSON object"
    end
    -- a caller adapter's respond, or its emitter, may refuse what it cannot carry
    -- (nil, message): a 502 like any answer that does not convert
    local caller = conv.caller
    local out
    if ires and ires.outputs[1] ~= nil then
        if not conv.sse then
            out, err = caller.respond(ireq, ires)
            out = out and (caller.encode or cjson.encode)(out) .. "\n"
        elseif caller.emitter then
            out, err = stream.synthesize(conv, ires)
        else
            out = sse.synthesize(ireq, ires)
        end
    end
    if not out then
        conv.failed = err or "answer holds no outputs"
        local body = failure(conv.failed)
        if conv.sse then
            return caller.emitter and caller.emitter.error(body) or sse.error_event(body)
        end
        return body .. "\n"
    end
    return out
end

function _M.body_filter(ctx)
    local conv = ctx.conv
    if not conv then
        return
    end
    local data, eof = ngx.arg[1], ngx.arg[2]
    if conv.frames and not conv.error then
        ngx.arg[1] = (stream.wanted(conv) and stream.frames or sse.frames)(conv, data, eof,
                                                                           failure)
        return
    end
    if conv.size == nil then
        conv.buf, conv.size = {}, 0
    end
    local limit = conv.error and MAX_ERROR_BODY or MAX_BUFFER
    if data ~= "" and not conv.overflow then
        conv.size = conv.size + #data
        if conv.size > limit then
            conv.overflow = true
            if not conv.error then
                conv.buf = nil
            end
        else
            conv.buf[#conv.buf + 1] = data
        end
    end
    if not eof then
        ngx.arg[1] = ""      -- later filters (tokens, cache) expect a string
        return
    end
    if conv.error then
        -- the backend's own words go to the log line, bounded; the caller gets the template
        local raw = concat(conv.buf)
        ctx.upstream_error = raw:sub(1, ERROR_EXCERPT)
        ngx.arg[1] = error_body(ctx, conv, not conv.overflow and cjson.decode(raw) or nil)
        return
    end
    if conv.overflow then
        conv.failed = "answer is larger than " .. MAX_BUFFER .. " bytes"
        ngx.arg[1] = failure(conv.failed) .. "\n"
        return
    end
    ngx.arg[1] = finish(conv, concat(conv.buf))
end

return _M
