-- Brief 000's envelope (POST /v1/predict) for audio models: a `model_type` "asr/…"
-- with base64 audio in params.input is a transcription, "tts/…" with the text in
-- params.input is speech (else the model's own media_tasks say which). The request
-- goes to the model's OpenAI backend (/v1/audio/transcriptions as multipart,
-- /v1/audio/speech) or vendor (its mapping, as sluice.media_convert builds it); the
-- answer comes back in the envelope: outputs [the transcript] or [base64 audio], and
-- usage.audio_seconds (sluice.media_convert.finish).
local cjson = require("cjson.safe")
local unified = require("sluice.adapters.unified")
local media_convert = require("sluice.media_convert")

local ngx = ngx
local ngx_req = ngx.req
local decode_base64 = ngx.decode_base64
local type = type
local str_sub = string.sub

-- what sluice.media_convert's filters read of the work (conv.media)
local WORK = {
    transcription = { task = "transcription", path = "/v1/audio/transcriptions" },
    speech = { task = "speech", path = "/v1/audio/speech" },
}
-- an OpenAI backend's transcription, spoken as a mapping
local OPENAI_ASR = { upload = "multipart", field = "file", defaults = {},
                     request = { model = "{{model}}", response_format = "json",
                                 language = "{{params.language}}" } }

local _M = {}

local function task_of(model_type, tasks)
    local prefix = type(model_type) == "string" and str_sub(model_type, 1, 4)
    if prefix == "asr/" then
        return tasks.transcription and "transcription"
    elseif prefix == "tts/" then
        return tasks.speech and "speech"
    end
    return tasks.transcription and "transcription" or tasks.speech and "speech" or nil
end

-- Access step (sluice.convert.prepare) for the envelope `doc` to compiled `model`
-- (one with media_tasks) through `pool`, whose adapter is `backend`. Returns status,
-- type, message on failure; else nil, nil, nil, nil and the backend path; sets
-- ctx.conv.
function _M.prepare(ctx, endpoint, doc, model, model_name, pool, backend)
    local ireq, err = unified.decode(endpoint, doc, model_name)
    if not ireq then
        return 400, "invalid_request", err
    end
    local task = task_of(doc.model_type, model.media_tasks)
    if not task then
        return 400, "invalid_request", "model " .. model_name .. " takes no audio work "
               .. "through the envelope (model_type asr/… or tts/…)"
    end
    local input = ireq.inputs[1]
    if ireq.inputs[2] ~= nil or type(input) ~= "string" then
        return 400, "invalid_request", "params.input must be one string: "
               .. (task == "speech" and "the text to speak" or "the audio in base64")
    end
    local mapping = pool.protocol == "vendor" and pool.mapping
    if not mapping and pool.protocol ~= "openai" then
        return 400, "invalid_request", "model " .. model_name .. " cannot do " .. task
               .. " (its backends speak " .. pool.protocol .. ")"
    end
    local params, values = ireq.params, { model = model_name, input = input }
    local body, ctype, path
    if task == "transcription" then
        local bytes = decode_base64(input)
        if not bytes then
            return 400, "invalid_request", "params.input must be the audio in base64"
        end
        local spoken = mapping or OPENAI_ASR
        if not spoken.upload then
            return 400, "invalid_request", "model " .. model_name .. "'s vendor mapping "
                   .. "takes no upload"
        end
        body, ctype = media_convert.file_request(spoken, bytes, "audio.wav", "audio/wav",
                                                 values, params)
        if not body then
            return 500, "internal_error", ctype
        end
        path = mapping and mapping.path or WORK.transcription.path
    else
        local req = mapping and media_convert.fill(mapping.request, values, params,
                                                   mapping.defaults)
                    or { model = model_name, input = input, voice = params.voice or "alloy",
                         response_format = "wav", speed = params.speed }
        body, err = cjson.encode(req)
        if not body then
            return 500, "internal_error", "failed to encode the backend request: " .. err
        end
        ctype, path = "application/json", mapping and mapping.path or WORK.speech.path
    end
    if mapping then
        media_convert.set_query_headers(mapping, values, params)
    end
    ngx_req.set_body_data(body)
    ngx_req.set_header("Content-Type", ctype)
    ngx_req.clear_header("Accept-Encoding")
    ctx.conv = { media = WORK[task], envelope = ireq, backend = backend, pool = pool,
                 frames = false, sse = false, format = "json", seconds = values.seconds }
    return nil, nil, nil, nil, path
end

return _M
