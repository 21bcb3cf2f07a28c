-- Audio and image requests to a vendor backend (a mapping's audio fields:
-- sluice.media_mapping), and its answer back in OpenAI's shape: the caller sees one
-- answer whichever vendor served it. Other protocols than OpenAI's and `vendor` are
-- refused with a 400 naming the model.
--
--   access:  the upload (read whole: the vendor's body is built from it) -> base64
--            in JSON, raw bytes, or a multipart part of the vendor's name; params to
--            the query string and headers (prepare)
--   filters: status and Content-Type of the caller's format (header); the answer,
--            buffered by sluice.convert, -> transcript text in the caller's
--            response_format, audio bytes (base64 in JSON decoded), images (finish)
local cjson = require("cjson.safe")
local media = require("sluice.media")
local multipart = require("sluice.multipart")
local common = require("sluice.adapters.common")
local unified = require("sluice.adapters.unified")
local fallback = require("sluice.fallback")

local ngx = ngx
local ngx_req = ngx.req
local encode_base64 = ngx.encode_base64
local decode_base64 = ngx.decode_base64
local io_open = io.open
local type = type
local pairs = pairs
local tostring = tostring
local str_sub = string.sub
local str_match = string.match
local concat = table.concat

local json_null = cjson.null
local BOUNDARY = "sluice-media-8f1c2a7e"

local _M = {}

-- The whole request body (the conversion needs it), or nil.
local function whole_body()
    local data = ngx_req.get_body_data()
    if data then
        return data
    end
    local path = ngx_req.get_body_file()
    local f = path and io_open(path, "rb")
    if not f then
        return nil
    end
    data = f:read("*a")
    f:close()
    return data
end

-- A template with its {{placeholders}} filled: a string that is exactly one becomes
-- the value (nil drops the key); `params` are the caller's fields, over `defaults`.
local function fill(node, values, params, defaults)   -- (also _M.fill)
    if type(node) == "string" then
        local name = str_match(node, "^{{%s*([%w_.]+)%s*}}$")
        if not name then
            return node
        end
        local pname = str_match(name, "^params%.([%w_]+)$")
        if pname then
            local v = params[pname]
            if v == nil then v = defaults[pname] end
            return v
        end
        local v = values[name]
        if v == nil then return node end
        return v
    end
    if type(node) ~= "table" or node == json_null then
        return node
    end
    local out = {}
    for k, v in pairs(node) do
        out[k] = fill(v, values, params, defaults)
    end
    return out
end

_M.fill = fill

-- The vendor body for the file `bytes` (named `filename`, of `ctype`), and its
-- Content-Type (sets values.file, .filename, .content_type, .seconds); or nil and why.
function _M.file_request(mapping, bytes, filename, ctype, values, params)
    values.filename = filename
    values.content_type = ctype or "application/octet-stream"
    values.seconds = media.wav_seconds(bytes)
    local how = mapping.upload
    if how == "raw" then
        return bytes, mapping.content_type or values.content_type
    elseif how == "multipart" then
        local out = {}
        for k, v in pairs(fill(mapping.request, values, params, mapping.defaults)) do
            out[#out + 1] = "--" .. BOUNDARY .. '\r\nContent-Disposition: form-data; name="'
                            .. k .. '"\r\n\r\n' .. tostring(v) .. "\r\n"
        end
        out[#out + 1] = "--" .. BOUNDARY .. '\r\nContent-Disposition: form-data; name="'
                        .. mapping.field .. '"; filename="' .. (filename or "upload")
                        .. '"\r\nContent-Type: ' .. values.content_type .. "\r\n\r\n"
        out[#out + 1] = bytes
        out[#out + 1] = "\r\n--" .. BOUNDARY .. "--\r\n"
        return concat(out), "multipart/form-data; boundary=" .. BOUNDARY
    end
    values.file = encode_base64(bytes)
    local body, err = cjson.encode(fill(mapping.request, values, params, mapping.defaults))
    if not body then
        return nil, "failed to encode the vendor request: " .. err
    end
    return body, "application/json"
end

-- The vendor body for an upload (`form`: sluice.upload's), and its Content-Type; or
-- nil and why not.
local function upload_body(ctx, mapping, form, values, params)
    local raw = whole_body()
    if not raw then
        return nil, "the upload could not be read back"
    end
    fallback.keep(ctx, raw)   -- the body this replaces, for another vendor's pass
    local parts = multipart.parse(raw, form.boundary)
    local file = parts and (multipart.find(parts, form.file.name))
    if not file or not file.to then
        return nil, "the upload's file part could not be read back"
    end
    return _M.file_request(mapping, str_sub(raw, file.from, file.to), file.filename,
                           file.content_type, values, params)
end

-- The vendor request's query string and headers, from the mapping's templates.
function _M.set_query_headers(mapping, values, params)
    if mapping.query then
        ngx_req.set_uri_args(fill(mapping.query, values, params, mapping.defaults))
    end
    for k, v in pairs(mapping.headers and fill(mapping.headers, values, params,
                                               mapping.defaults) or {}) do
        ngx_req.set_header(k, v)
    end
end

-- Access step (sluice.convert.prepare): the vendor request of a media endpoint, with
-- ctx.conv set for the filters. Returns status, type, message, extra on failure;
-- else nil, nil, nil, nil and the backend path.
function _M.prepare(ctx, endpoint, doc, model_name, pool, vendor)
    local mapping = pool.protocol == "vendor" and pool.mapping
    if not mapping or (endpoint.upload and not mapping.upload) then
        return 400, "invalid_request_error", "model " .. model_name .. " cannot serve "
               .. endpoint.path .. " (its backends speak " .. pool.protocol .. ")",
               { param = "model" }
    end
    local form = ctx.body.form
    local params = form and form.fields or doc or {}
    local values = { model = model_name, input = params.input or params.prompt }
    local body, ctype
    if form then
        body, ctype = upload_body(ctx, mapping, form, values, params)
        if not body then
            return 500, "internal_error", ctype
        end
    else
        local err
        body, err = cjson.encode(fill(mapping.request, values, params, mapping.defaults))
        if not body then
            return 500, "internal_error", "failed to encode the vendor request: " .. err
        end
        ctype = "application/json"
    end
    _M.set_query_headers(mapping, values, params)
    ngx_req.set_body_data(body)
    ngx_req.set_header("Content-Type", ctype)
    ngx_req.clear_header("Accept-Encoding")   -- we must read what comes back
    ctx.conv = { media = endpoint, backend = vendor, pool = pool, frames = false,
                 sse = false, format = params.response_format, language = params.language,
                 seconds = values.seconds, n = doc and doc.n }
    return nil, nil, nil, nil, mapping.path
end

-- Header filter of a 2xx answer: the Content-Type the caller gets.
function _M.content_type(conv)
    local task = conv.media.task
    if conv.envelope then
        return "application/json"
    end
    if task == "speech" then
        return conv.pool.mapping.audio_type
    elseif task == "image" then
        return "application/json"
    end
    local fmt = conv.format
    if fmt == "text" or fmt == "srt" or fmt == "vtt" then
        return "text/plain; charset=utf-8"
    end
    return "application/json"
end

-- What the backend's answer `raw` holds: the audio (bytes), the images (a list of
-- base64 strings), or the transcript and its seconds (nil: unknown); or nil and why
-- not. An OpenAI backend's in OpenAI's shape, a vendor's where its mapping says.
local function extract(conv, raw)
    local pool, task = conv.pool, conv.media.task
    local mapping = pool.protocol == "vendor" and pool.mapping
    if task == "speech" and (not mapping or mapping.audio == "") then
        return raw   -- the answer is the audio
    end
    local doc = cjson.decode(raw)
    if type(doc) ~= "table" then
        return nil, "answer is not a JSON object"
    end
    if task == "speech" then
        local at = mapping.audio or mapping.output
        local b64 = common.pointer(doc, at)
        local audio = type(b64) == "string" and decode_base64(b64)
        if not audio then
            return nil, "answer has no base64 audio at " .. at
        end
        return audio
    elseif task == "image" then
        local images
        if mapping then
            images = common.pointer(doc, mapping.image or mapping.output)
            if type(images) == "string" then
                images = { images }
            end
        elseif type(doc.data) == "table" then
            images = {}
            for i = 1, #doc.data do
                images[i] = type(doc.data[i]) == "table" and doc.data[i].b64_json or nil
            end
        end
        if type(images) ~= "table" or type(images[1]) ~= "string" then
            return nil, "answer holds no base64 image"
        end
        return images
    end
    local text, seconds
    if mapping then
        text = common.pointer(doc, mapping.output)
        seconds = mapping.duration and common.pointer(doc, mapping.duration)
    else
        text = doc.text
        seconds = type(doc.usage) == "table" and doc.usage.seconds or doc.duration
    end
    if type(text) ~= "string" then
        return nil, "answer has no transcript" .. (mapping and " at " .. mapping.output or "")
    end
    if type(seconds) ~= "number" then
        seconds = conv.seconds
    end
    return text, seconds
end

-- Body filter at the answer's end: the caller's body, or nil and why not (a 502).
-- Sets conv.audio_seconds (a transcript's) for usage.
function _M.finish(conv, raw)
    local out, seconds = extract(conv, raw)
    if not out then
        return nil, seconds
    end
    local task = conv.media.task
    if task == "transcription" or task == "translation" then
        conv.audio_seconds = seconds
    end
    if conv.envelope then   -- brief 000's envelope (sluice.media_envelope)
        local output = out
        if task == "speech" then
            output = encode_base64(out)
        elseif task == "image" then
            output = out[1]
        end
        return cjson.encode(unified.respond(conv.envelope, {
            outputs = { output },
            usage = seconds and { audio_seconds = seconds } or nil })) .. "\n"
    end
    if task == "speech" then
        return out
    elseif task == "image" then
        local data = {}
        for i = 1, #out do
            data[i] = { b64_json = out[i] }
        end
        return cjson.encode({ created = ngx.time(), data = data }) .. "\n"
    end
    local _, body = media.render(conv.format, out, seconds, conv.language,
                                 task == "translation" and "translate" or "transcribe",
                                 cjson.encode)
    return body
end

return _M
