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

-- Is `s` (a Content-Type) JSON?
function _M.json_type(s)
    return s ~= nil and str_find(str_lower(s), "json", 1, true) ~= nil
end

return _M
