-- The Gemini backend adapter (sluice/adapters/gemini.lua): OpenAI chat and one-text
-- requests to generateContent bodies, and its answers and stream frames back, as
-- ai.google.dev/api/generate-content documents them.
local gemini = require("sluice.adapters.gemini")
local cjson = require("cjson.safe")

local T = {}

local function chat(messages, params, stream)
    return { kind = "chat", model = "m", messages = messages, inputs = { "x" },
             params = params or {}, stream = stream, meta = {} }
end

function T.system_user_and_sampling()
    local path, body = gemini.request(chat({
        { role = "system", content = "be brief" },
        { role = "developer", content = "in French" },
        { role = "user", content = "hello" },
        { role = "assistant", content = "bonjour" },
        { role = "user", content = { { type = "text", text = "and " }, { type = "text", text = "you?" } } },
    }, { max_tokens = 32, temperature = 0.2, top_p = 0.9, stop = "END", seed = 7 }), nil, "m")
    assert(path == ":generateContent", path)
    assert(body.systemInstruction.parts[1].text == "be brief")
    assert(body.systemInstruction.parts[2].text == "in French")
    assert(#body.contents == 3)
    assert(body.contents[1].role == "user" and body.contents[1].parts[1].text == "hello")
    assert(body.contents[2].role == "model" and body.contents[2].parts[1].text == "bonjour")
    assert(#body.contents[3].parts == 2 and body.contents[3].parts[2].text == "you?")
    local g = body.generationConfig
    assert(g.maxOutputTokens == 32 and g.temperature == 0.2 and g.topP == 0.9 and g.seed == 7)
    assert(g.stopSequences[1] == "END" and #g.stopSequences == 1)
end

function T.streams_to_sse_path()
    local path = gemini.request(chat({ { role = "user", content = "hi" } }, {}, true), nil, "m")
    assert(path == ":streamGenerateContent?alt=sse", path)
    assert(gemini.streams({ stream = true }) and not gemini.streams({ stream = false }))
end

function T.one_text_input()
    local path, body = gemini.request({ kind = "predict", inputs = { "translate" },
                                        params = { max_length = 5 } }, nil, "m")
    assert(path == ":generateContent")
    assert(body.contents[1].role == "user" and body.contents[1].parts[1].text == "translate")
    assert(body.generationConfig.maxOutputTokens == 5)
    local p, msg, param = gemini.request({ kind = "predict", inputs = { "a", "b" }, params = {} },
                                         nil, "m")
    assert(p == nil and msg:find("one text input") and param == "input")
end

function T.tools_calls_and_results()
    local tools = { { type = "function", ["function"] = { name = "lookup", description = "d",
                      parameters = { type = "object", properties = { q = { type = "string" } } } } } }
    local _, body = gemini.request(chat({
        { role = "user", content = "use a tool" },
        { role = "assistant", content = cjson.null, tool_calls = {
            { id = "call_a", type = "function",
              ["function"] = { name = "lookup", arguments = '{"q":"x"}' } },
            { id = "call_b", type = "function",
              ["function"] = { name = "lookup", arguments = '{"q":"y"}' } } } },
        { role = "tool", tool_call_id = "call_a", content = '{"found": 1}' },
        { role = "tool", tool_call_id = "call_b", content = "plain words" },
    }, { tools = tools, tool_choice = "required" }), nil, "m")
    local decl = body.tools[1].functionDeclarations[1]
    assert(decl.name == "lookup" and decl.description == "d" and decl.parameters.type == "object")
    assert(body.toolConfig.functionCallingConfig.mode == "ANY")
    local model = body.contents[2]
    assert(model.role == "model" and #model.parts == 2)
    assert(model.parts[1].functionCall.name == "lookup" and model.parts[2].functionCall.args.q == "y")
    local results = body.contents[3]   -- parallel results: one user turn
    assert(results.role == "user" and #results.parts == 2 and #body.contents == 3)
    assert(results.parts[1].functionResponse.response.found == 1)
    assert(results.parts[2].functionResponse.name == "lookup")
    assert(results.parts[2].functionResponse.response.output == "plain words")
end

function T.refusals_name_the_parameter()
    local p, msg, param = gemini.request(chat({ { role = "user", content = "x" },
        { role = "tool", tool_call_id = "nope", content = "r" } }), nil, "m")
    assert(p == nil and msg:find("tool_call_id") and param == "messages")
    p, msg, param = gemini.request(chat({ { role = "user", content = {
        { type = "image_url", image_url = { url = "https://x/y.png" } } } } }), nil, "m")
    assert(p == nil and msg:find("data: URLs") and param == "messages")
    p, msg, param = gemini.request(chat({ { role = "user", content = "x" } }, { n = 2 }), nil, "m")
    assert(p == nil and msg:find("n = 1") and param == "n")
    local _, body = gemini.request(chat({ { role = "user", content = {
        { type = "image_url", image_url = { url = "data:image/png;base64,iVBORw0=" } } } } }), nil, "m")
    assert(body.contents[1].parts[1].inlineData.mimeType == "image/png")
end

function T.answer_text_finish_usage()
    local ires = gemini.response(cjson.decode([[{"candidates": [{"content": {"role": "model",
        "parts": [{"text": "thinking", "thought": true}, {"text": "Hello"}, {"text": " world"}]},
        "finishReason": "MAX_TOKENS", "index": 0}],
        "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 2, "totalTokenCount": 6},
        "modelVersion": "gemini-2.0-flash"}]]))
    assert(ires.outputs[1] == "Hello world" and ires.finish == "length")
    assert(ires.usage.prompt_tokens == 4 and ires.usage.completion_tokens == 2
           and ires.usage.total_tokens == 6)
    assert(ires.tool_calls == nil)
    local none, why = gemini.response(cjson.decode(
        '{"promptFeedback": {"blockReason": "SAFETY"}}'))
    assert(none == nil and why:find("SAFETY"))
end

function T.answer_function_calls()
    local ires = gemini.response(cjson.decode([[{"candidates": [{"content": {"role": "model",
        "parts": [{"functionCall": {"name": "lookup", "args": {"q": "x"}}}]},
        "finishReason": "STOP"}]}]]))
    assert(ires.finish == "tool_calls" and ires.outputs[1] == "")
    assert(ires.tool_calls[1].name == "lookup" and ires.tool_calls[1].id == "call_1")
    assert(cjson.decode(ires.tool_calls[1].arguments).q == "x")
    assert(ires.tool_calls[1]["function"] == nil)   -- the internal form only (adapters/chat.lua)
end

function T.stream_frames_and_events()
    local first = cjson.decode([[{"candidates": [{"content": {"role": "model",
        "parts": [{"text": "Hel"}]}}], "usageMetadata": {"promptTokenCount": 4}}]])
    local last = cjson.decode([[{"candidates": [{"content": {"role": "model",
        "parts": [{"functionCall": {"name": "f", "args": {}}}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 3}}]])
    assert(gemini.frame == nil)   -- adapters/stream.lua reads its events
    local conv = {}
    local evs = gemini.events(first, conv)
    assert(#evs == 1 and evs[1].text == "Hel")
    evs = gemini.events(last, conv)
    assert(evs[1].call == 0 and evs[1].name == "f" and evs[1].args == "{}")
    assert(evs[2].finish == "tool_calls" and evs[3].usage.completion_tokens == 3)
    assert(conv.gemini_calls == 1)
    local bad, msg = gemini.events(cjson.decode(
        '{"error": {"code": 500, "message": "boom", "status": "INTERNAL"}}'))
    assert(bad == nil and msg == "INTERNAL: boom")
end

return T
