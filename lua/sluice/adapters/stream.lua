-- Streams converted event by event: a backend adapter with `events(doc, conv)` turns
-- each of its SSE frames into internal events (adapters/chat.lua), and the caller's
-- emitter (`emitter` of the caller adapter: Responses' or Anthropic's events, or
-- OpenAI chat chunks by default) writes them in the caller's protocol; an emitter's
-- event or finish may refuse (nil, message: what the caller's protocol cannot carry),
-- which stops the stream with an error event. A whole answer for a streaming
-- caller goes the same way (synthesize). Frames of older backend adapters (`frame`:
-- a text delta) go through adapters/sse.lua instead.
local cjson = require("cjson.safe")
local chat = require("sluice.adapters.chat")
local chat_stream = require("sluice.adapters.chat_stream")
local json_prefix = require("sluice.json_prefix")

local ngx = ngx
local ngx_log = ngx.log
local ERR = ngx.ERR
local type = type
local ipairs = ipairs
local pairs = pairs
local concat = table.concat
local str_find = string.find
local str_sub = string.sub
local str_match = string.match
local str_gsub = string.gsub

local MAX_PENDING = 1024 * 1024   -- bytes of one unfinished backend frame

local _M = {}

local function emitter(conv)
    return conv.caller.emitter or chat_stream
end

-- Does this pair stream through here (rather than adapters/sse.lua)?
function _M.wanted(conv)
    return conv.backend.events ~= nil or conv.caller.emitter ~= nil
end

-- A whole internal response, for a caller that asked for a stream.
-- nil, message when the emitter refuses an event (see frames).
function _M.synthesize(conv, ires)
    local emit = emitter(conv)
    local out = { emit.start(conv) }
    for _, ev in ipairs(chat.events_of(ires)) do
        local s, err = emit.event(conv, ev)
        if not s then
            return nil, err
        end
        out[#out + 1] = s
    end
    local s, err = emit.finish(conv)
    if not s then
        return nil, err
    end
    out[#out + 1] = s
    return concat(out)
end

function _M.error_event(conv, body)
    return emitter(conv).error(body)
end

-- The internal events of one backend frame: the adapter's own, or a text delta.
local function events_of(backend, doc, conv)
    if backend.events then
        return backend.events(doc, conv)
    end
    local delta, err = backend.frame(doc)
    if not delta then
        return nil, err
    end
    return { { text = delta } }
end

-- The argument pieces of each tool call (conv.args), checked as they come (each must
-- keep them the start of a JSON object: sluice.json_prefix; the piece that breaks
-- them never reaches the caller) and whole once the stream ends. Returns why the
-- call's arguments cannot be given to the caller, or nil.
local function track_args(conv, ev)
    local args = conv.args
    if not args then
        args = {}
        conv.args = args
    end
    local list = args[ev.call]
    if not list then
        list = { prefix = json_prefix.new() }
        args[ev.call] = list
    end
    local piece = ev.args or ""
    list[#list + 1] = piece
    if piece ~= "" and not json_prefix.feed(list.prefix, piece) then
        return "the backend's tool call arguments are not a JSON object"
    end
    return nil
end

-- Why the streamed tool calls cannot be given to the caller (arguments that are no
-- JSON object), or nil.
local function bad_args(conv)
    for _, list in pairs(conv.args or {}) do
        local text = concat(list)
        if text ~= "" and type(cjson.decode(text)) ~= "table" then
            return "the backend's tool call arguments are not a JSON object"
        end
    end
    return nil
end

-- Body filter for a streaming backend: converts every complete frame in what has
-- arrived; keeps a partial frame for the next call (conv.pending); conv.failed the
-- reason the stream stopped; conv.texts[1] set once a frame converted (what
-- sluice.relay waits for before the status goes out, as with adapters/sse.lua).
function _M.frames(conv, data, eof, fail)
    local emit = emitter(conv)
    local pending = (conv.pending or "") .. str_gsub(data, "\r\n", "\n")
    local out = {}
    if not conv.started then
        conv.started = true
        conv.texts = {}
        out[1] = emit.start(conv)
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
            local evs, err
            if type(doc) == "table" then
                evs, err = events_of(conv.backend, doc, conv)
            else
                err = "stream frame is not JSON"
            end
            if evs then
                if evs[1] then
                    conv.texts[1] = true
                end
                for i = 1, #evs do
                    local ev = evs[i]
                    if ev.call then
                        err = track_args(conv, ev)
                        if err then
                            break
                        end
                    end
                    local s
                    s, err = emit.event(conv, ev)
                    if not s then
                        break
                    end
                    out[#out + 1] = s
                end
            end
            if err then
                ngx_log(ERR, "backend stream failed: ", err)
                conv.failed = err
                out[#out + 1] = emit.error(fail(err))
            end
        end
    end
    conv.pending = str_sub(pending, pos)
    if #conv.pending > MAX_PENDING then
        conv.failed = "a backend stream frame is too large"
        conv.pending = ""
        out[#out + 1] = emit.error(fail(conv.failed))
    end
    if eof and not conv.failed then
        local err = bad_args(conv)
        if err then
            ngx_log(ERR, "backend stream failed: ", err)
            conv.failed = err
            out[#out + 1] = emit.error(fail(err))
        else
            local s
            s, err = emit.finish(conv)
            if s then
                out[#out + 1] = s
            else
                ngx_log(ERR, "backend stream failed: ", err)
                conv.failed = err
                out[#out + 1] = emit.error(fail(err))
            end
        end
    end
    return concat(out)
end

return _M
