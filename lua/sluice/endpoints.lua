-- The caller-facing endpoints. Each names the caller protocol (an adapter module in
-- lua/sluice/adapters/), the kind of work ("chat", "completion", "embedding",
-- "predict"), the backend protocol that takes its body unchanged ("native"), and
-- where the model name comes from (the JSON body or the path).
--
--   POST /v1/chat/completions           openai     chat        model in body
--   POST /v1/completions                openai     completion  model in body
--   POST /v1/embeddings                 openai     embedding   model in body
--   POST /v1/messages                   anthropic  chat        model in body
--   POST /v1/messages/count_tokens      anthropic  (answered by the gateway)
--   POST /v1/audio/transcriptions       openai     media       model in the form (upload)
--   POST /v1/audio/translations         openai     media       model in the form (upload)
--   POST /v1/audio/speech               openai     media       model in body
--   POST /v1/images/generations         openai     media       model in body
--   POST /v1/images/edits               openai     media       model in the form (upload)
--   POST /v1/responses                  openai     chat        model in body (the
--                                       Responses API: adapters/responses.lua)
--   GET  /v1/models[/{model}]           the models the key may use
--   GET, DELETE /v1/responses/{id}      a response a Responses backend kept (stored.lua),
--   GET  /v1/responses/{id}/input_items read back, deleted, its input items listed,
--   POST /v1/responses/{id}/cancel      cancelled: through that backend unchanged
--   POST /v1/predict                    unified    predict     model in body (envelope)
--   POST /api/v1/model/{model}/infer    infer      predict     model in path
--   POST /v1/models/{model}/predict     predict    predict     model in path (KServe v1)
--   POST /v2/models/{model}/infer       kserve_v2  predict     model in path (OIP v2)
local ngx = ngx
local ngx_var = ngx.var
local ngx_req = ngx.req
local re_match = ngx.re.match
local jobs = require("sluice.jobs")
local plain_path = require("sluice.bytes").plain_path

local _M = {}

local BY_PATH = {
    ["/v1/chat/completions"] = { name = "chat", caller = "openai", kind = "chat",
                                 native = "openai" },
    ["/v1/completions"] = { name = "completions", caller = "openai", kind = "completion",
                            native = "openai" },
    ["/v1/embeddings"] = { name = "embeddings", caller = "openai", kind = "embedding",
                           native = "openai" },
    ["/v1/messages"] = { name = "messages", caller = "anthropic", kind = "chat", llm = true,
                         native = "anthropic" },
    ["/v1/messages/count_tokens"] = { name = "count_tokens", caller = "anthropic",
                                      kind = "chat", answered = true },
    -- audio and images (sluice.media: `task` is what a model must serve; `path`, the
    -- OpenAI backend's; an upload's form is read by sluice.upload, its file part
    -- named `file_field`)
    ["/v1/audio/transcriptions"] = { name = "transcriptions", caller = "openai", kind = "media",
                                     native = "openai", task = "transcription", upload = true,
                                     file_field = "file", path = "/v1/audio/transcriptions" },
    ["/v1/audio/translations"] = { name = "translations", caller = "openai", kind = "media",
                                   native = "openai", task = "translation", upload = true,
                                   file_field = "file", path = "/v1/audio/translations" },
    ["/v1/audio/speech"] = { name = "speech", caller = "openai", kind = "media",
                             native = "openai", task = "speech", path = "/v1/audio/speech" },
    ["/v1/images/generations"] = { name = "images", caller = "openai", kind = "media",
                                   native = "openai", task = "image",
                                   path = "/v1/images/generations" },
    ["/v1/images/edits"] = { name = "image_edits", caller = "openai", kind = "media",
                             native = "openai", task = "image", upload = true,
                             file_field = "image", path = "/v1/images/edits" },
    -- `api`: the caller adapter when it is not `caller` (errors stay OpenAI's)
    ["/v1/responses"] = { name = "responses", caller = "openai", api = "responses",
                          kind = "chat", native = "openai_responses" },
    ["/v1/predict"] = { name = "unified", caller = "unified", kind = "predict" },
    ["/v1/models"] = { name = "models", method = "GET" },
}

-- Checked in order: the model name is the first capture.
local BY_PATTERN = {
    { [[^/v1/models/([^/]+)/predict\z]],
      { name = "predict", caller = "predict", kind = "predict", native = "predict",
        model_in_path = true } },
    { [[^/v2/models/([^/]+)/infer\z]],
      { name = "v2_infer", caller = "kserve_v2", kind = "predict", native = "kserve_v2",
        model_in_path = true } },
    { [[^/api/v1/model/([^/]+)/infer\z]],
      { name = "infer", caller = "infer", kind = "predict", model_in_path = true } },
    -- a kept response (sluice.stored): its id, not a model, in the path. A path that
    -- several methods take: the endpoint per method, and `method` the Allow header's
    -- value, which no request method equals (match answers 405, as jobs.lua's paths)
    { [[^/v1/responses/([A-Za-z0-9_-]+)\z]],
      { method = "GET, DELETE",
        GET = { name = "response_get", caller = "openai", method = "GET", stored = true,
                native = "openai_responses" },
        DELETE = { name = "response_delete", caller = "openai", method = "DELETE",
                   stored = true, native = "openai_responses" } } },
    { [[^/v1/responses/([A-Za-z0-9_-]+)/input_items\z]],
      { name = "response_input_items", caller = "openai", method = "GET", stored = true,
        native = "openai_responses" } },
    { [[^/v1/responses/([A-Za-z0-9_-]+)/cancel\z]],
      { name = "response_cancel", caller = "openai", stored = true,
        native = "openai_responses" } },
    { [[^/v1/models/([^/]+)\z]],
      { name = "model", method = "GET", model_in_path = true } },
}


-- Which endpoint a request is for. Access step: returns status, type, message on
-- failure (a 405 sets the Allow header); else nil, nil, nil, nil, endpoint and the
-- model named by the path (or nil). (`uri` is percent-decoded and normalised by nginx;
-- kept in ctx.req.uri for the log line; ctx.req.plain_path is the same string when the
-- caller sent it so, unescaped.) $request_uri as sluice.headers read it; $uri only
-- for a path nginx normalised.
function _M.match(ctx)
    local req = ctx.req
    local uri = plain_path(req.request_uri or ngx_var.request_uri)
    req.plain_path = uri
    if not uri then
        uri = ngx_var.uri
    end
    req.uri = uri
    local asked = ngx_req.get_method()
    local endpoint, model = BY_PATH[uri], nil
    if not endpoint then
        for i = 1, #BY_PATTERN do
            local m = re_match(uri, BY_PATTERN[i][1], "jo")
            if m then
                local found = BY_PATTERN[i][2]
                endpoint, model = found[asked] or found, m[1]   -- (per method: see above)
                break
            end
        end
    end
    endpoint = endpoint or jobs.endpoint(uri, asked)   -- jobs, files, batches
    if not endpoint then
        return 404, "not_found", "no endpoint at " .. uri
    end
    local method = endpoint.method or "POST"
    if asked ~= method then
        ngx.header["Allow"] = method
        return 405, "method_not_allowed", uri .. " only accepts " .. method
    end
    return nil, nil, nil, nil, endpoint, model
end

return _M
