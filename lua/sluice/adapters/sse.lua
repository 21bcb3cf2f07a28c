-- OpenAI server-sent events for callers that asked `"stream": true` of a backend that
-- speaks another protocol: frame by frame when the backend streams (its adapter has
-- `streams` and `frame`), or whole when it cannot (one content chunk at the end).
-- Every stream ends with a finish chunk, the usage chunk when the caller asked
-- (stream_options.include_usage) and `data: [DONE]`.
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")
local openai = require("sluice.adapters.openai")

local ngx = ngx
local ngx_time = ngx.time
local ngx_log = ngx.log
local ERR = ngx.ERR
local type = type
local concat = table.concat
local str_find = string.find
local str_sub = string.sub
local str_match = string.match
local str_gsub = string.gsub

local json_null = cjson.null
local encode = cjson.encode

local DONE = "data: [DONE]\n\n"
local MAX_PENDING = 1024 * 1024   -- bytes of one unfinished backend frame

local _M = {}

local function event(obj)
    return "data: " .. encode(obj) .. "\n\n"
end

local function chunk(ireq, content, finish, role)
    local choice
    if ireq.kind == "chat" then
        local delta = {}
        if role then delta.role = "assistant" end
        if content then delta.content = content end
        choice = { index = 0, delta = delta, finish_reason = finish or json_null }
    else
        choice = { index = 0, text = content or "", finish_reason = finish or json_null,
                   logprobs = json_null }
    end
    return event({ id = openai.response_id(ireq), created = ngx_time(), model = ireq.model,
                   object = ireq.kind == "chat" and "chat.completion.chunk" or "text_completion",
                   choices = { choice } })
end

-- cjson writes an empty table as {}, so the usage chunk's empty "choices" list is
-- spliced in by hand.
local function usage_chunk(ireq, usage)
    return "data: {\"id\":" .. encode(openai.response_id(ireq))
        .. ",\"object\":\"" .. (ireq.kind == "chat" and "chat.completion.chunk" or "text_completion")
        .. "\",\"created\":" .. ngx_time() .. ",\"model\":" .. encode(ireq.model)
        .. ",\"choices\":[],\"usage\":" .. encode(usage) .. "}\n\n"
end

local function ending(ireq, ires)
    local out = chunk(ireq, nil, "stop")
    if ireq.include_usage then
        out = out .. usage_chunk(ireq, common.text_usage(ireq, ires))
    end
    return out .. DONE
end

-- An error inside a stream whose 200 has gone out: the OpenAI client raises on it.
function _M.error_event(body)
    return "data: " .. body .. "\n\n" .. DONE
end

-- A whole (non-streamed) internal response as a stream.
function _M.synthesize(ireq, ires)
    local text = common.text(ires.outputs[1])
    local first = ireq.kind == "chat" and chunk(ireq, "", nil, true) or ""
    return first .. chunk(ireq, text) .. ending(ireq, ires)
end

-- Body filter for a streaming backend: converts every complete frame in what has
-- arrived; keeps a partial frame for the next call. `conv` carries the state:
-- conv.texts the deltas converted, conv.failed the reason the stream stopped.
function _M.frames(conv, data, eof, fail)
    local ireq, backend = conv.ireq, conv.backend
    local pending = (conv.pending or "") .. str_gsub(data, "\r\n", "\n")
    local out = {}
    if not conv.started then
        conv.started = true
        conv.texts = {}
        if ireq.kind == "chat" then
            out[1] = chunk(ireq, "", nil, true)
        end
    end
    local pos = 1
    while not conv.failed do
        local stop = str_find(pending, "\n\n", pos, true)
        if not stop then break end
        local block = str_sub(pending, pos, stop - 1)
        pos = stop + 2
        local payload = str_match(block, "^data:%s?(.*)$") or str_match(block, "\ndata:%s?(.*)$")
        if payload and payload ~= "[DONE]" then
            local doc = cjson.decode(payload)
            local delta, err
            if type(doc) == "table" then
                delta, err = backend.frame(doc)
            else
                err = "stream frame is not JSON"
            end
            if delta then
                conv.texts[#conv.texts + 1] = delta
                out[#out + 1] = chunk(ireq, delta)
            else
                ngx_log(ERR, "backend stream failed: ", err)
                conv.failed = err
                out[#out + 1] = _M.error_event(fail(err))
            end
        end
    end
    conv.pending = str_sub(pending, pos)
    if #conv.pending > MAX_PENDING then
        conv.failed = "a backend stream frame is too large"
        conv.pending = ""
        out[#out + 1] = _M.error_event(fail(conv.failed))
    end
    if eof and not conv.failed then
        out[#out + 1] = ending(ireq, { outputs = { concat(conv.texts) } })
    end
    return concat(out)
end

return _M
