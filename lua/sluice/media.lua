-- Audio and image work: which models do it, how large a request may be, and which
-- files they take.
--
-- A model says what media work it does in the snapshot's `media_tasks` (a list of
-- "transcription", "translation", "speech", "image"); a model without it does none
-- (a chat model asked for speech is a 400 naming `model`). `max_request_bytes` bounds
-- one request's body (null: DEFAULT_MAX for the media endpoints, the gateway's
-- client_max_body_size elsewhere); past it, 413.
--
-- Pure Lua (no ngx.*): the upload step (sluice.upload) and the access steps call it.
local type = type
local pairs = pairs
local ipairs = ipairs
local str_lower = string.lower
local str_match = string.match
local str_sub = string.sub
local str_find = string.find
local str_byte = string.byte
local str_format = string.format
local floor = math.floor
local setmetatable = setmetatable
local tostring = tostring

local MiB = 1024 * 1024
local DEFAULT_MAX = 25 * MiB
local TASKS = { transcription = true, translation = true, speech = true, image = true }

-- The file types each upload endpoint takes: by Content-Type, or, for the generic
-- application/octet-stream (or none), by the file name's extension.
local AUDIO_EXT = { flac = true, mp3 = true, mp4 = true, mpeg = true, mpga = true,
                    m4a = true, ogg = true, oga = true, opus = true, wav = true,
                    webm = true, pcm = true }
local IMAGE_EXT = { png = true, jpg = true, jpeg = true, webp = true, gif = true }
local IMAGE_TYPES = { ["image/png"] = true, ["image/jpeg"] = true, ["image/webp"] = true,
                      ["image/gif"] = true }

local _M = { DEFAULT_MAX = DEFAULT_MAX }

-- Snapshot validation of model `m` (at `where`): nil, or what is wrong.
function _M.validate_model(m, where)
    local mrb = m.max_request_bytes
    if mrb ~= nil and type(mrb) ~= "userdata" then   -- (cjson's null: a userdata)
        if type(mrb) ~= "number" or mrb < 1 or mrb % 1 ~= 0 then
            return where .. ".max_request_bytes: must be null or an integer >= 1"
        end
    end
    local tasks = m.media_tasks
    if tasks ~= nil and type(tasks) ~= "userdata" then
        if type(tasks) ~= "table" then
            return where .. ".media_tasks: must be null or a list"
        end
        for _, t in ipairs(tasks) do
            if not TASKS[t] then
                return where .. ".media_tasks: unknown task " .. tostring(t)
            end
        end
    end
    return nil
end

-- What config.lua keeps of model `m` for this module: its task set (nil: none) and
-- its body limit (nil: the default).
function _M.compile_model(m)
    local set
    if type(m.media_tasks) == "table" then
        for _, t in ipairs(m.media_tasks) do
            set = set or {}
            set[t] = true
        end
    end
    local mrb = m.max_request_bytes
    return set, type(mrb) == "number" and mrb or nil
end

-- The body limit of compiled model `model` at `endpoint` (nil: none of ours).
function _M.limit(model, endpoint)
    local own = model.max_request_bytes
    if own then
        return own
    end
    return endpoint.task and DEFAULT_MAX or nil
end

-- The largest body any model of compiled snapshot `snap` takes at `endpoint`: what an
-- upload may be before its model is known. Kept per snapshot table.
local largest_of = setmetatable({}, { __mode = "k" })
function _M.largest(snap, endpoint)
    local by = largest_of[snap]
    if not by then
        by = {}
        largest_of[snap] = by
    end
    local n = by[endpoint]
    if not n then
        n = DEFAULT_MAX
        for _, model in pairs(snap.models) do
            local own = model.max_request_bytes
            if own and own > n and model.media_tasks and model.media_tasks[endpoint.task] then
                n = own
            end
        end
        by[endpoint] = n
    end
    return n
end

-- The smallest body limit of a model of `snap` that does `endpoint`'s work: a larger
-- upload may be over its model's limit (sluice.upload reads its head first then).
local smallest_of = setmetatable({}, { __mode = "k" })
function _M.smallest(snap, endpoint)
    local by = smallest_of[snap]
    if not by then
        by = {}
        smallest_of[snap] = by
    end
    local n = by[endpoint]
    if not n then
        n = DEFAULT_MAX
        for _, model in pairs(snap.models) do
            local own = model.max_request_bytes
            if own and own < n and model.media_tasks and model.media_tasks[endpoint.task] then
                n = own
            end
        end
        by[endpoint] = n
    end
    return n
end

-- Access step, for compiled model `model` (nil: a route, checked once it chose) at
-- `endpoint`, its body `len` bytes: nil, or status, type, message, extra (the
-- parameter named for an OpenAI caller).
function _M.check(endpoint, model, len)
    if not model then
        return nil
    end
    local task = endpoint.task
    if task and not (model.media_tasks and model.media_tasks[task]) then
        return 400, "invalid_request_error", "model " .. model.name .. " does not serve "
               .. task .. " (" .. endpoint.path .. ")", { param = "model" }
    end
    local max = _M.limit(model, endpoint)
    if max and len and len > max then
        return 413, "payload_too_large", "the request body (" .. len .. " bytes) is larger than"
               .. " model " .. model.name .. " takes (" .. max .. " bytes)"
    end
    return nil
end

-- Does `endpoint` take an uploaded file of `content_type` named `filename`? nil, or
-- why not.
function _M.file_type_error(endpoint, content_type, filename)
    local ct = content_type and str_lower(str_match(content_type, "^[^;%s]+") or "")
    local ext = filename and str_lower(str_match(filename, "%.([%w]+)$") or "")
    local audio = endpoint.task ~= "image"
    if ct and ct ~= "" and ct ~= "application/octet-stream" then
        if audio and (str_sub(ct, 1, 6) == "audio/" or str_sub(ct, 1, 6) == "video/") then
            return nil
        end
        if not audio and IMAGE_TYPES[ct] then
            return nil
        end
        return "a file of type " .. ct .. " is not " .. (audio and "audio" or
               "a PNG, JPEG, WebP or GIF image")
    end
    local known = audio and AUDIO_EXT or IMAGE_EXT
    if ext and known[ext] then
        return nil
    end
    return "the file's type is unknown: send it with an " .. (audio and "audio/*" or "image/*")
           .. " Content-Type or a known extension"
end

-- Seconds of audio in `bytes` when it is a RIFF/WAVE file (its fmt chunk's byte
-- rate and its data chunk's size), else nil. `cut`: `bytes` is only the file's start
-- (the upload's head): the data chunk's declared size counts.
local function u32(s, i)
    local a, b, c, d = str_byte(s, i, i + 3)
    return a + b * 256 + c * 65536 + d * 16777216
end

function _M.wav_seconds(bytes, cut)
    if #bytes < 44 or str_sub(bytes, 1, 4) ~= "RIFF" or str_sub(bytes, 9, 12) ~= "WAVE" then
        return nil
    end
    local pos, rate = 13, nil
    while pos + 8 <= #bytes + 1 do
        local id, size = str_sub(bytes, pos, pos + 3), u32(bytes, pos + 4)
        if id == "fmt " and size >= 16 then
            rate = u32(bytes, pos + 16)
        elseif id == "data" then
            if not rate or rate == 0 then
                return nil
            end
            local n = #bytes - pos - 7
            return ((cut or size < n) and size or n) / rate
        end
        pos = pos + 8 + size + size % 2
    end
    return nil
end

local function stamp(seconds, sep)
    local ms = floor(seconds * 1000 + 0.5)
    local h, m, s = floor(ms / 3600000), floor(ms / 60000) % 60, floor(ms / 1000) % 60
    return str_format("%02d:%02d:%02d%s%03d", h, m, s, sep, ms % 1000)
end

-- A transcript `text` of `seconds` of audio (nil: unknown) in OpenAI's
-- `response_format` `fmt` (json, text, srt, vtt, verbose_json): its Content-Type and
-- body; `encode` is the JSON encoder. `task` is "transcribe" or "translate".
function _M.render(fmt, text, seconds, language, task, encode)
    fmt = fmt or "json"
    local secs = seconds and floor(seconds * 1000 + 0.5) / 1000
    if fmt == "text" then
        return "text/plain; charset=utf-8", text .. "\n"
    elseif fmt == "srt" or fmt == "vtt" then
        local sep = fmt == "vtt" and "." or ","
        local cue = stamp(0, sep) .. " --> " .. stamp(secs or 0, sep) .. "\n" .. text .. "\n"
        return "text/plain; charset=utf-8", (fmt == "vtt" and "WEBVTT\n\n" or "1\n") .. cue
    end
    local usage = secs and { type = "duration", seconds = secs } or nil
    if fmt == "verbose_json" then
        return "application/json", encode({
            task = task, language = language or "", duration = secs or 0, text = text,
            usage = usage,
            segments = { { id = 0, seek = 0, start = 0, ["end"] = secs or 0, text = text,
                           tokens = {}, temperature = 0, avg_logprob = 0,
                           compression_ratio = 1, no_speech_prob = 0 } } })
    end
    return "application/json", encode({ text = text, usage = usage })
end

-- Is `s` (a Content-Type) JSON?
function _M.json_type(s)
    return s ~= nil and str_find(str_lower(s), "json", 1, true) ~= nil
end

return _M
