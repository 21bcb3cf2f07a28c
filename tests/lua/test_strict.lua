-- Strict requests (sluice/strict.lua): each field the protocols define, good and bad,
-- and the param named for the first bad one.
local strict = require("sluice.strict")
local cjson = require("cjson.safe")

local T = {}

local function chat(extra)
    local doc = { model = "m", messages = { { role = "user", content = "hi" } } }
    for k, v in pairs(extra or {}) do
        doc[k] = v
    end
    return doc
end

local function bad(endpoint, doc, param, limit)
    local p, msg = strict.check(endpoint, doc, limit)
    assert(p == param, "expected param " .. param .. ", got " .. tostring(p))
    assert(type(msg) == "string" and msg ~= "", "no message for " .. param)
end

local function good(endpoint, doc, limit)
    local p, msg = strict.check(endpoint, doc, limit)
    assert(p == nil, "refused " .. tostring(p) .. ": " .. tostring(msg))
end

function T.valid_chat_passes()
    good("chat", chat({ temperature = 0.7, top_p = 1, max_tokens = 16, n = 2,
                        stop = { "a", "b" }, stream = true, unknown_field = { 1, 2 } }))
    good("chat", chat({ temperature = cjson.null, stop = "x" }))
end

function T.temperature_type_and_range()
    bad("chat", chat({ temperature = "hot" }), "temperature")
    bad("chat", chat({ temperature = 2.5 }), "temperature")
    bad("chat", chat({ temperature = -0.1 }), "temperature")
    good("chat", chat({ temperature = 0 }))
    good("chat", chat({ temperature = 2 }))
    bad("chat", chat({ top_p = 1.5 }), "top_p")
    bad("chat", chat({ presence_penalty = 3 }), "presence_penalty")
end

function T.max_tokens_against_the_limit()
    bad("chat", chat({ max_tokens = -5 }), "max_tokens")
    bad("chat", chat({ max_tokens = 0 }), "max_tokens")
    bad("chat", chat({ max_tokens = 1.5 }), "max_tokens")
    bad("chat", chat({ max_tokens = 1e18 }), "max_tokens")
    bad("chat", chat({ max_completion_tokens = 101 }), "max_completion_tokens", 100)
    good("chat", chat({ max_completion_tokens = 100 }), 100)
    assert(strict.limit({ max_output_tokens = 512 }) == 512)
    assert(strict.limit({}) == strict.DEFAULT_MAX_OUTPUT)
    assert(strict.limit({ max_output_tokens = cjson.null }) == strict.DEFAULT_MAX_OUTPUT)
end

function T.n_stop_stream()
    bad("chat", chat({ n = 0 }), "n")
    bad("chat", chat({ n = 1000 }), "n")
    bad("chat", chat({ stop = { "a", "b", "c", "d", "e" } }), "stop")
    bad("chat", chat({ stop = { 1 } }), "stop")
    bad("chat", chat({ stop = 7 }), "stop")
    bad("chat", chat({ stream = "yes" }), "stream")
    bad("chat", chat({ stream_options = "x" }), "stream_options")
end

function T.messages_roles_and_parts()
    bad("chat", { model = "m", messages = "hi" }, "messages")
    bad("chat", { model = "m" }, "messages")
    bad("chat", { model = "m", messages = {} }, "messages")
    bad("chat", { model = "m", messages = { { role = "wizard", content = "x" } } },
        "messages[0].role")
    bad("chat", { model = "m", messages = { { role = "user", content = "x" },
                                            { role = "user", content = 5 } } },
        "messages[1].content")
    bad("chat", { model = "m", messages = { { role = "user",
                                              content = { { type = "video", url = "x" } } } } },
        "messages[0].content[0].type")
    bad("chat", { model = "m", messages = { { role = "user", content = { { type = "text" } } } } },
        "messages[0].content[0].text")
    good("chat", { model = "m", messages = {
        { role = "developer", content = "be brief" },
        { role = "user", content = { { type = "text", text = "what is this" },
                                     { type = "image_url", image_url = { url = "data:x" } } } },
        { role = "assistant", content = cjson.null, tool_calls = { { id = "1" } } },
        { role = "tool", content = "42", tool_call_id = "1" } } })
end

function T.tools()
    local fn = { type = "function", ["function"] = { name = "get_weather",
                                                    parameters = { type = "object" } } }
    good("chat", chat({ tools = { fn } }))
    bad("chat", chat({ tools = "all" }), "tools")
    bad("chat", chat({ tools = { { type = "retrieval" } } }), "tools[0].type")
    bad("chat", chat({ tools = { { type = "function", ["function"] = { name = "a b" } } } }),
        "tools[0].function.name")
    bad("chat", chat({ tools = { { type = "function",
                                   ["function"] = { name = "f", parameters = "x" } } } }),
        "tools[0].function.parameters")
end

function T.completions_and_embeddings()
    good("completions", { model = "m", prompt = "once" })
    good("completions", { model = "m", prompt = { { 1, 2 }, { 3 } } })
    bad("completions", { model = "m", prompt = { true } }, "prompt")
    bad("completions", { model = "m", prompt = "x", temperature = "hot" }, "temperature")
    good("embeddings", { model = "m", input = { "a", "b" } })
    bad("embeddings", { model = "m" }, "input")
    bad("embeddings", { model = "m", input = 3 }, "input")
end

function T.seed_envelopes()
    local env = { api_version = "1.0", model_type = "nlp/sentiment",
                  params = { input = { "good" }, threshold = 0.5 }, request_id = "r1" }
    good("unified", env)
    bad("unified", { api_version = "2.0", params = { input = 1 } }, "api_version")
    bad("unified", { api_version = "1.0", params = "x" }, "params")
    bad("unified", { api_version = "1.0", params = { x = 1 } }, "params.input")
    bad("unified", { api_version = "1.0", model_type = 5, params = { input = 1 } }, "model_type")
    bad("unified", { api_version = "1.0", params = { input = 1, temperature = "hot" } },
        "params.temperature")
    bad("unified", { api_version = "1.0", params = { input = 1, max_tokens = -5 } },
        "params.max_tokens")
    good("infer", { input = "x", params = { max_length = 50, temperature = 0.7 } })
    bad("infer", { params = {} }, "input")
    bad("infer", { input = "x", params = { 1, 2 } }, "params")
    bad("infer", { input = "x", params = { top_p = 7 } }, "params.top_p")
    good("predict", { instances = "anything" })   -- KServe bodies pass as they are
end

return T
