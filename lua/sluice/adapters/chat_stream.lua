-- OpenAI chat (and completions) chunks for an OpenAI caller whose backend streams
-- internal events (adapters/chat.lua): text deltas, tool call deltas (index, id and
-- name on a call's first chunk, then its argument pieces), the finish chunk, the
-- usage chunk when the caller asked (stream_options.include_usage), `data: [DONE]`.
-- The emitter's state rides in conv.cs (adapters/stream.lua calls start, event,
-- finish).
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")
local openai = require("sluice.adapters.openai")

local ngx = ngx
local ngx_time = ngx.time
local concat = table.concat
local encode = cjson.encode

local json_null = cjson.null

local _M = {}

local function chunk(ireq, delta, finish)
    local choice
    if ireq.kind == "chat" then
        choice = { index = 0, delta = delta, finish_reason = finish or json_null }
    else
        choice = { index = 0, text = delta.content or "", finish_reason = finish or json_null,
                   logprobs = json_null }
    end
    return "data: " .. encode({ id = openai.response_id(ireq), created = ngx_time(),
                                model = ireq.model, choices = { choice },
                                object = ireq.kind == "chat" and "chat.completion.chunk"
                                         or "text_completion" }) .. "\n\n"
end

function _M.start(conv)
    conv.cs = { texts = {}, calls = {}, n = 0 }
    if conv.ireq.kind == "chat" then
        return chunk(conv.ireq, { role = "assistant", content = "" })
    end
    return ""
end

function _M.event(conv, ev)
    local st, ireq = conv.cs, conv.ireq
    if ev.text then
        st.texts[#st.texts + 1] = ev.text
        return chunk(ireq, { content = ev.text })
    elseif ev.call then
        if ireq.kind ~= "chat" then
            return ""
        end
        local index = st.calls[ev.call]
        local tc
        if not index then
            index = st.n
            st.n = index + 1
            st.calls[ev.call] = index
            tc = { index = index, id = ev.id, type = "function",
                   ["function"] = { name = ev.name, arguments = ev.args or "" } }
        else
            tc = { index = index, ["function"] = { arguments = ev.args or "" } }
        end
        st.texts[#st.texts + 1] = " " .. (ev.args or "")
        return chunk(ireq, { tool_calls = { tc } })
    elseif ev.finish then
        st.finish = ev.finish
    elseif ev.usage then
        st.usage = ev.usage
    end
    return ""
end

function _M.finish(conv)
    local st, ireq = conv.cs, conv.ireq
    local out = { chunk(ireq, {}, st.finish or (st.n > 0 and "tool_calls" or "stop")) }
    if ireq.include_usage then
        local usage = common.text_usage(ireq, { outputs = { concat(st.texts) },
                                                usage = st.usage })
        out[2] = "data: " .. encode({ id = openai.response_id(ireq), created = ngx_time(),
                                      model = ireq.model, usage = usage,
                                      object = ireq.kind == "chat" and "chat.completion.chunk"
                                               or "text_completion" }):gsub("}$", ",\"choices\":[]}")
                 .. "\n\n"
    end
    out[#out + 1] = "data: [DONE]\n\n"
    return concat(out)
end

function _M.error(body)
    return "data: " .. body .. "\n\n" .. "data: [DONE]\n\n"
end

return _M
