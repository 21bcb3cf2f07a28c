-- A backend adapter's `messages[N]…` named in the caller's own request
-- (adapters/common.lua caller_path) for an Anthropic request converted to the chat
-- form (adapters/anthropic_convert.lua): `system` lifted to messages[0], a user turn's
-- tool results split off before its other blocks.
local ac = require("sluice.adapters.anthropic_convert")
local common = require("sluice.adapters.common")

local T = {}

local function converted()
    local chat = assert(ac.to_chat({ system = "be brief", max_tokens = 5, messages = {
        { role = "user", content = "use a tool x" },
        { role = "assistant", content = { { type = "text", text = "calling" },
                                          { type = "tool_use", id = "t1", name = "f",
                                            input = { q = 1 } },
                                          { type = "tool_use", id = "t2", name = "f",
                                            input = { q = 2 } } } },
        { role = "user", content = { { type = "tool_result", tool_use_id = "t1", content = "a" },
                                     { type = "tool_result", tool_use_id = "t2", content = "b" },
                                     { type = "text", text = "and" },
                                     { type = "image", source = { type = "url",
                                                                  url = "http://x/i.png" } } } } } }))
    return { messages = chat.messages, origin = chat.origin }
end

local function path(ireq, param)
    return common.caller_path(ireq, param, "messages", ac.call_path)
end

function T.messages_shifted_by_the_lifted_system()
    local ireq = converted()
    -- chat form: 0 system, 1 user, 2 assistant, 3 and 4 tool, 5 user (text, image)
    assert(ireq.messages[6].role == "user" and ireq.messages[4].role == "tool")
    assert(path(ireq, "messages[0].content") == "system")
    assert(path(ireq, "messages[1].role") == "messages[0].role")
    assert(path(ireq, "messages[4].content") == "messages[2].content")
    -- the image is the turn's block 3 (two tool results came first)
    assert(path(ireq, "messages[5].content[1].type") == "messages[2].content[3].type")
    assert(path(ireq, "messages[2].tool_calls[1].function.arguments")
           == "messages[1].content[2].input")
end

function T.other_params_unchanged()
    local ireq = converted()
    assert(path(ireq, "tools[0].type") == "tools[0].type")
    assert(path(ireq, "messages[9].role") == "messages[9].role")
    assert(path({ messages = ireq.messages }, "messages[1].role") == "messages[1].role")
end

return T
