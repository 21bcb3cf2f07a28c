-- Audio and image rules (sluice/media.lua): which model does what, body limits, file
-- types, a WAV's seconds, and transcripts in OpenAI's response formats.
local media = require("sluice.media")
local cjson = require("cjson")

local T = {}

local SPEECH = { task = "speech", path = "/v1/audio/speech" }
local ASR = { task = "transcription", path = "/v1/audio/transcriptions", upload = true }
local IMAGE = { task = "image", path = "/v1/images/edits", upload = true }
local CHAT = { name = "chat" }

local function u32(n)
    return string.char(n % 256, math.floor(n / 256) % 256, math.floor(n / 65536) % 256,
                       math.floor(n / 16777216) % 256)
end

-- A 16 kHz 16-bit mono WAV header announcing `data_len` bytes, and `have` of them.
local function wav(data_len, have)
    return "RIFF" .. u32(36 + data_len) .. "WAVEfmt " .. u32(16) .. "\1\0\1\0" .. u32(16000)
           .. u32(32000) .. "\2\0\16\0" .. "data" .. u32(data_len) .. string.rep("\0", have)
end

function T.tasks_and_limits()
    local tasks, max = media.compile_model({ media_tasks = { "speech", "image" },
                                             max_request_bytes = 1000 })
    local m = { name = "tts", media_tasks = tasks, max_request_bytes = max }
    assert(media.check(SPEECH, m, 10) == nil)
    local status, _, msg, extra = media.check(ASR, m, 10)
    assert(status == 400 and extra.param == "model" and msg:find("transcription"), msg)
    status = media.check(SPEECH, m, 1001)
    assert(status == 413)
    local chat = { name = "chat-demo" }   -- no media_tasks: no media work
    status, _, msg, extra = media.check(SPEECH, chat, 10)
    assert(status == 400 and extra.param == "model" and msg:find("chat%-demo"), msg)
    assert(media.check(CHAT, chat, 10 ^ 9) == nil, "a text endpoint: the gateway's limit")
    assert(media.limit(chat, ASR) == media.DEFAULT_MAX)
    assert(media.check(SPEECH, nil, 10) == nil, "a route: checked once it chose")
end

function T.largest_limit_per_snapshot()
    local snap = { models = {
        a = { max_request_bytes = 50 * 2 ^ 20, media_tasks = { transcription = true } },
        b = { max_request_bytes = 90 * 2 ^ 20, media_tasks = { image = true } },
        c = { media_tasks = { transcription = true } } } }
    assert(media.largest(snap, ASR) == 50 * 2 ^ 20)
    assert(media.largest(snap, IMAGE) == 90 * 2 ^ 20)
    assert(media.largest({ models = {} }, ASR) == media.DEFAULT_MAX)
end

function T.validation()
    assert(media.validate_model({ media_tasks = { "speech" }, max_request_bytes = 5 }, "m") == nil)
    assert(media.validate_model({ media_tasks = cjson.null, max_request_bytes = cjson.null },
                                "m") == nil)
    assert(media.validate_model({ media_tasks = { "dance" } }, "m"):find("dance"))
    assert(media.validate_model({ media_tasks = "speech" }, "m"):find("list"))
    assert(media.validate_model({ max_request_bytes = 0 }, "m"):find("max_request_bytes"))
    assert(media.validate_model({ max_request_bytes = 1.5 }, "m"):find("max_request_bytes"))
end

function T.file_types()
    assert(media.file_type_error(ASR, "audio/wav", "a.wav") == nil)
    assert(media.file_type_error(ASR, "video/mp4", "a.mp4") == nil)
    assert(media.file_type_error(ASR, "application/octet-stream", "a.MP3") == nil)
    assert(media.file_type_error(ASR, nil, "a.flac") == nil)
    assert(media.file_type_error(ASR, "text/plain", "a.wav"):find("text/plain"))
    assert(media.file_type_error(ASR, "application/octet-stream", "a.txt"):find("unknown"))
    assert(media.file_type_error(IMAGE, "image/png; x=1", "i.png") == nil)
    assert(media.file_type_error(IMAGE, "audio/wav", "i.wav"):find("audio/wav"))
    assert(media.file_type_error(IMAGE, nil, "i.jpeg") == nil)
end

function T.wav_seconds()
    assert(media.wav_seconds(wav(32000, 32000)) == 1)
    assert(media.wav_seconds(wav(64000, 100)) == 100 / 32000, "whole: what is there")
    assert(media.wav_seconds(wav(64000, 100), true) == 2, "cut: what the header says")
    assert(media.wav_seconds("ID3" .. string.rep("\0", 60)) == nil)
    assert(media.wav_seconds("RIFF") == nil)
end

function T.render_formats()
    local ct, body = media.render("json", "hi there", 1.5, "zh", "transcribe", cjson.encode)
    local doc = cjson.decode(body)
    assert(ct == "application/json" and doc.text == "hi there" and doc.usage.seconds == 1.5)
    ct, body = media.render("text", "hi", 1.5, nil, "transcribe", cjson.encode)
    assert(ct:find("text/plain") and body == "hi\n")
    ct, body = media.render("srt", "hi", 3725.25, nil, "transcribe", cjson.encode)
    assert(ct:find("text/plain"))
    assert(body == "1\n00:00:00,000 --> 01:02:05,250\nhi\n", body)
    ct, body = media.render("vtt", "hi", 1.5, nil, "transcribe", cjson.encode)
    assert(ct:find("text/plain"))
    assert(body == "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nhi\n", body)
    ct, body = media.render("verbose_json", "hi", 2, "zh", "translate", cjson.encode)
    assert(ct == "application/json")
    doc = cjson.decode(body)
    assert(doc.task == "translate" and doc.language == "zh" and doc.duration == 2)
    assert(doc.segments[1]["end"] == 2 and doc.segments[1].text == "hi")
    ct, body = media.render(nil, "x", nil, nil, "transcribe", cjson.encode)
    assert(ct == "application/json")
    assert(cjson.decode(body).usage == nil, "seconds unknown: no usage")
end

return T
