-- adapters/sse.lua: OpenAI server-sent events for a caller that asked "stream": true
-- of a backend of another protocol, whole (synthesize) or frame by frame (frames,
-- here from a KServe v2 generate_stream backend), always ending with a finish chunk,
-- the usage chunk when asked and data: [DONE].
local cjson = require("cjson.safe")
local sse = require("sluice.adapters.sse")
local kserve_v2 = require("sluice.adapters.kserve_v2")

local T = {}

-- The events of an SSE text: decoded JSON objects, or the string "[DONE]".
local function events(text)
    local out = {}
    for payload in text:gmatch("data: ([^\n]*)\n\n") do
        out[#out + 1] = payload == "[DONE]" and payload or assert(cjson.decode(payload), payload)
    end
    return out
end

local function chat(include_usage)
    return { kind = "chat", model = "llm", inputs = { "say hello" }, stream = true,
             include_usage = include_usage }
end

function T.a_whole_answer_as_a_chat_stream()
    local text = sse.synthesize(chat(true), { outputs = { "Hello world" } })
    assert(text:sub(-14) == "data: [DONE]\n\n", text)
    local ev = events(text)
    assert(#ev == 5, #ev)
    assert(ev[1].object == "chat.completion.chunk" and ev[1].choices[1].delta.role == "assistant")
    assert(ev[2].choices[1].delta.content == "Hello world" and ev[2].model == "llm")
    assert(ev[3].choices[1].finish_reason == "stop")
    -- the usage chunk: no choices, the usage estimated by words
    assert(#ev[4].choices == 0 and text:find('"choices":[]', 1, true))
    assert(ev[4].usage.prompt_tokens == 2 and ev[4].usage.completion_tokens == 2
           and ev[4].usage.total_tokens == 4, cjson.encode(ev[4].usage))
    assert(ev[5] == "[DONE]")
end

function T.no_usage_chunk_unless_asked()
    local ev = events(sse.synthesize(chat(false), { outputs = { "Hi" } }))
    assert(#ev == 4 and ev[4] == "[DONE]", #ev)
    for i = 1, 3 do assert(ev[i].usage == nil) end
end

function T.a_completion_stream_has_text_chunks()
    local ireq = { kind = "completion", model = "llm", inputs = { "a" }, stream = true }
    local ev = events(sse.synthesize(ireq, { outputs = { "b c" } }))
    assert(#ev == 3, #ev)   -- no role chunk
    assert(ev[1].object == "text_completion" and ev[1].choices[1].text == "b c")
    assert(ev[2].choices[1].finish_reason == "stop" and ev[3] == "[DONE]")
end

local function no_fail(err)
    error("fail() called: " .. tostring(err))
end

function T.backend_frames_convert_as_they_arrive_even_split()
    local conv = { ireq = chat(false), backend = kserve_v2 }
    -- a frame cut in the middle waits for its rest; CRLF framing is accepted
    local out1 = sse.frames(conv, 'data: {"text_output": "Hel"}\r\n\r\ndata: {"text_out', false,
                            no_fail)
    local ev = events(out1)
    assert(#ev == 2, out1)
    assert(ev[1].choices[1].delta.role == "assistant" and ev[2].choices[1].delta.content == "Hel")
    local out2 = sse.frames(conv, 'put": "lo"}\n\n', false, no_fail)
    ev = events(out2)
    assert(#ev == 1 and ev[1].choices[1].delta.content == "lo", out2)
    local out3 = sse.frames(conv, "", true, no_fail)
    ev = events(out3)
    assert(#ev == 2 and ev[1].choices[1].finish_reason == "stop" and ev[2] == "[DONE]", out3)
    assert(table.concat(conv.texts) == "Hello")
end

function T.a_failed_frame_ends_the_stream_with_an_error_event()
    local conv = { ireq = chat(false), backend = kserve_v2 }
    local reason
    local function fail(err)
        reason = err
        return cjson.encode({ error = { message = err, type = "backend_error" } })
    end
    local out = sse.frames(conv, 'data: {"text_output": "a"}\n\ndata: {"error": "OOM"}\n\n'
                           .. 'data: {"text_output": "never"}\n\n', true, fail)
    assert(reason == "OOM" and conv.failed == "OOM", tostring(reason))
    local ev = events(out)
    -- role, "a", the error, [DONE]: nothing after the failure, no finish chunk
    assert(#ev == 4, out)
    assert(ev[3].error.message == "OOM" and ev[4] == "[DONE]")
    assert(not out:find("never", 1, true))
end

return T
