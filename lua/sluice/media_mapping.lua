-- A vendor mapping's audio and image fields (docs/contracts.md, "mappings"), beside
-- the text ones sluice.mappings reads; validated and compiled with them.
--
--   "upload": how the caller's file goes to the vendor:
--       "json"       the body is the `request` template as JSON; {{file}} is the
--                    file in base64 (brief 000's vendors)
--       "raw"        the body is the file's bytes, sent as `content_type` (default:
--                    the file's own)
--       "multipart"  a multipart/form-data body: the file in part `field` (default
--                    "file"), the `request` template's values as plain fields
--       absent       JSON from the `request` template, no file (speech, images)
--   "query", "headers": templates of query-string parameters and request headers
--   "defaults": {"language": "zh"}, what {{params.NAME}} is when the caller sent none
--   "response": "output" the text (a transcript), "duration" its seconds (else the
--       file's own, from a WAV header), "audio" base64 audio in the answer ("" : the
--       answer's body is the audio itself), "audio_type" its Content-Type (default
--       audio/wav), "image" base64 image (a list or one)
-- Templates take {{file}}, {{filename}}, {{content_type}}, {{model}}, {{input}} (the
-- text to speak, the prompt to draw) and {{params.NAME}} (a field the caller sent).
local type = type
local pairs = pairs
local ipairs = ipairs

local UPLOADS = { json = true, raw = true, multipart = true }

local _M = {}

local function is_pointer(p)
    return type(p) == "string" and (p == "" or p:sub(1, 1) == "/")
end

local function flat_strings(t)
    if t == nil then
        return true
    end
    if type(t) ~= "table" then
        return false
    end
    for k, v in pairs(t) do
        if type(k) ~= "string" or (type(v) ~= "string" and type(v) ~= "number") then
            return false
        end
    end
    return true
end

-- nil, or what is wrong with mapping `m` at `where`.
function _M.validate(m, where)
    if m.upload ~= nil and not UPLOADS[m.upload] then
        return where .. '.upload: must be "json", "raw" or "multipart"'
    end
    for _, k in ipairs({ "query", "headers", "defaults" }) do
        if not flat_strings(m[k]) then
            return where .. "." .. k .. ": must be an object of strings"
        end
    end
    for _, k in ipairs({ "field", "content_type" }) do
        if m[k] ~= nil and type(m[k]) ~= "string" then
            return where .. "." .. k .. ": must be a string"
        end
    end
    local r = m.response
    for _, k in ipairs({ "duration", "audio", "image" }) do
        if r[k] ~= nil and not is_pointer(r[k]) then
            return where .. ".response." .. k .. ": must be a JSON pointer"
        end
    end
    if r.audio_type ~= nil and type(r.audio_type) ~= "string" then
        return where .. ".response.audio_type: must be a string"
    end
    return nil
end

-- The compiled mapping `out` (sluice.mappings) with these fields added.
function _M.compile(m, out)
    local r = m.response
    out.upload, out.field, out.content_type = m.upload, m.field or "file", m.content_type
    out.query, out.headers, out.defaults = m.query, m.headers, m.defaults or {}
    out.duration, out.audio, out.image = r.duration, r.audio, r.image
    out.audio_type = r.audio_type or "audio/wav"
    return out
end

return _M
