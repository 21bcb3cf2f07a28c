-- Anthropic Messages streams, both sides, on the internal stream events of
-- adapters/chat.lua ({ text } | { call, id, name, args } | { finish } | { usage }),
-- which adapters/stream.lua carries from any backend to any caller.
--
-- Caller side (the emitter: start, event, finish, error): the events an Anthropic
-- client reads: message_start, then per content block content_block_start,
-- content_block_delta (text_delta, input_json_delta), content_block_stop;
-- message_delta (stop_reason, usage), message_stop. A failure after the 200 is an
-- `error` event. A tool call's arguments go out as they come, one input_json_delta
-- per backend delta; when its block closes they must parse as a JSON object, or the
-- stream ends with an error event. Blocks are sequential: a call that starts while
-- another's arguments are still incomplete (parallel calls interleaved) is held, its
-- arguments buffered, and sent in one checked input_json_delta once the open call's
-- arguments are complete or the stream ends. More arguments for a call whose block
-- has closed cannot be placed: an error event.
--
-- Backend side (events): an `anthropic` backend's events into internal events, its
-- tool arguments checked the same way when their block stops. State rides in the
-- request's conv table.
local cjson = require("cjson.safe")
local ac = require("sluice.adapters.anthropic_convert")

local ngx = ngx
local type = type
local tostring = tostring
local concat = table.concat
local remove = table.remove

local encode = cjson.encode
local decode = cjson.decode

local _M = {}

local function event(name, obj)
    return "event: " .. name .. "\ndata: " .. encode(obj) .. "\n\n"
end

-- ---- caller side ----------------------------------------------------------------

-- cjson writes an empty table as {}: the empty content list is spliced in by hand.
local function message_start(ireq, id)
    return 'event: message_start\ndata: {"type":"message_start","message":{"id":'
        .. encode(id) .. ',"type":"message","role":"assistant","model":'
        .. encode(ireq.model) .. ',"content":[],"stop_reason":null,"stop_sequence":null,'
        .. '"usage":{"input_tokens":0,"output_tokens":0}}}\n\n'
end

local function args_ok(args)
    if args == "" then
        return "{}"
    end
    local v = decode(args)
    if type(v) ~= "table" or v[1] ~= nil then
        return nil
    end
    return args
end

-- Whether a call's arguments so far are a whole JSON object (nothing may follow).
local function complete(pieces)
    local args = concat(pieces)
    return args ~= "" and args_ok(args) ~= nil
end

local function delta(out, index, piece)
    out[#out + 1] = event("content_block_delta", {
        type = "content_block_delta", index = index,
        delta = { type = "input_json_delta", partial_json = piece } })
end

-- Close the open block: a tool block's arguments checked (`{}` sent when none came).
local function close(s, out)
    local open = s.open
    if not open then
        return true
    end
    s.open = nil
    if s.kind == "tool" then
        local args = args_ok(concat(s.args))
        if not args then
            return nil, "the backend streamed tool arguments that are not a JSON object"
        end
        if not s.sent then
            delta(out, open, args)
        end
    end
    out[#out + 1] = event("content_block_stop", { type = "content_block_stop", index = open })
    return true
end

local function open_block(s, kind, block, out)
    local ok, err = close(s, out)
    if not ok then
        return nil, err
    end
    s.n = s.n + 1
    s.open, s.kind = s.n, kind
    out[#out + 1] = event("content_block_start", { type = "content_block_start",
                                                   index = s.n, content_block = block })
    return true
end

-- Open call `c`'s tool block; the arguments it has so far go out in one delta.
local function open_call(s, c, out)
    local ok, err = open_block(s, "tool", { type = "tool_use", id = c.id or ("call_" .. c.k),
                                            name = c.name or "", input = {} }, out)
    if not ok then
        return nil, err
    end
    s.tools[c.k] = s.n
    s.args = c.args
    s.calls = true
    local args = concat(c.args)
    s.sent = args ~= ""
    if s.sent then
        delta(out, s.n, args)
    end
    return true
end

-- The held calls, in order, while the open one is complete.
local function promote(s, out)
    local held = s.held
    while held[1] and (s.kind ~= "tool" or not s.open or complete(s.args)) do
        local c = remove(held, 1)
        s.holding[c.k] = nil
        local ok, err = open_call(s, c, out)
        if not ok then
            return nil, err
        end
    end
    return true
end

local function call_event(s, ev, out)
    local k = ev.call
    local piece = type(ev.args) == "string" and ev.args or ""
    local at = s.tools[k]
    if at then
        if at == s.open then
            s.args[#s.args + 1] = piece
            if piece ~= "" then
                s.sent = true
                delta(out, at, piece)
            end
            if s.held[1] then
                return promote(s, out)
            end
            return true
        end
        if piece:find("%S") then
            return nil, "the backend interleaved the arguments of parallel tool calls"
        end
        return true
    end
    local c = s.holding[k]
    if c then
        c.args[#c.args + 1] = piece
        return true
    end
    c = { k = k, id = ev.id, name = ev.name, args = { piece } }
    if s.kind == "tool" and s.open and not complete(s.args) then
        s.holding[k] = c   -- the open call is not done: held until it is
        s.held[#s.held + 1] = c
        return true
    end
    return open_call(s, c, out)
end

local function message_id()
    return "msg_" .. (ngx.var.sl_id or "")
end
_M.message_id = message_id

function _M.start(conv)
    conv.anthropic = { n = -1, tools = {}, texts = {}, held = {}, holding = {} }
    return message_start(conv.ireq, message_id())
end

-- One internal event as Anthropic events; nil, message when it cannot be carried.
function _M.event(conv, ev)
    local s = conv.anthropic
    local out = {}
    local text = ev.text
    if text then
        if text == "" then
            return ""
        end
        s.texts[#s.texts + 1] = text
        if s.kind ~= "text" or not s.open then
            local ok, err = open_block(s, "text", { type = "text", text = "" }, out)
            if not ok then return nil, err end
        end
        out[#out + 1] = event("content_block_delta", {
            type = "content_block_delta", index = s.open,
            delta = { type = "text_delta", text = text } })
    elseif ev.call then
        local ok, err = call_event(s, ev, out)
        if not ok then return nil, err end
    elseif ev.finish then
        s.finish = ev.finish
    elseif ev.usage then
        s.usage = ev.usage
    end
    return concat(out)
end

-- The end of a stream: the open block closed, message_delta and message_stop; nil,
-- message when the open tool block's arguments are no JSON object.
function _M.finish(conv)
    local s = conv.anthropic
    local out = {}
    local ok, err = close(s, out)
    if ok then
        ok, err = promote(s, out)   -- held calls, each in one checked delta
    end
    if ok then
        ok, err = close(s, out)
    end
    if not ok then
        return nil, err
    end
    local ireq = conv.ireq
    local ires = { outputs = { concat(s.texts) }, usage = s.usage }
    local stop = s.calls and "tool_use" or ac.STOP[s.finish] or "end_turn"
    out[#out + 1] = event("message_delta", { type = "message_delta",
                                             delta = { stop_reason = stop, stop_sequence = cjson.null },
                                             usage = ac.usage_of(ireq, ires) })
    out[#out + 1] = 'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    return concat(out)
end

-- An error after the 200: `body` is the error template (sluice.errors), already in
-- Anthropic's shape for an Anthropic caller.
function _M.error(body)
    return "event: error\ndata: " .. body .. "\n\n"
end

-- ---- backend side ---------------------------------------------------------------

-- One event of an `anthropic` backend's stream -> a list of internal events, or nil,
-- message.
local NONE = {}

local function frame(b, doc)
    local t = doc.type
    if t == "content_block_delta" then
        local d = doc.delta
        if type(d) ~= "table" then
            return NONE
        end
        if d.type == "text_delta" then
            return type(d.text) == "string" and { { text = d.text } } or NONE
        elseif d.type == "input_json_delta" then
            local block = b.blocks[doc.index]
            if not block then
                return nil, "a tool argument delta outside a tool_use block"
            end
            local piece = type(d.partial_json) == "string" and d.partial_json or ""
            block.args[#block.args + 1] = piece
            return { { call = block.tool, args = piece } }
        end
        return NONE   -- thinking and signature deltas stay with the backend
    elseif t == "content_block_start" then
        local cb = doc.content_block
        if type(cb) ~= "table" then
            return NONE
        end
        if cb.type == "tool_use" then
            b.tool = b.tool + 1
            b.blocks[doc.index] = { tool = b.tool, args = {} }
            return { { call = b.tool, id = cb.id, name = cb.name, args = "" } }
        elseif cb.type == "text" and type(cb.text) == "string" and cb.text ~= "" then
            return { { text = cb.text } }
        end
        return NONE
    elseif t == "content_block_stop" then
        local block = b.blocks[doc.index]
        if block and not args_ok(concat(block.args)) then
            return nil, "the backend streamed tool arguments that are not a JSON object"
        end
        return NONE
    elseif t == "message_start" then
        local m = doc.message
        local u = type(m) == "table" and m.usage
        if type(u) == "table" then
            local _, prompt = ac.usage({ input_tokens = u.input_tokens, output_tokens = 0,
                                         cache_read_input_tokens = u.cache_read_input_tokens,
                                         cache_creation_input_tokens = u.cache_creation_input_tokens })
            b.prompt = prompt
        end
        return NONE
    elseif t == "message_delta" then
        local d = doc.delta
        local evs = {}
        if type(d) == "table" and type(d.stop_reason) == "string" then
            evs[1] = { finish = ac.FINISH[d.stop_reason] or "stop" }
        end
        local u = ac.usage(doc.usage, b.prompt)
        if u then
            evs[#evs + 1] = { usage = u }
        end
        return evs
    elseif t == "error" then
        local e = doc.error
        return nil, "the backend's stream failed: "
                    .. (type(e) == "table" and tostring(e.message) or "error event")
    end
    return NONE   -- ping, message_stop
end

function _M.events(doc, conv)
    local b = conv.from_anthropic
    if not b then
        b = { tool = -1, blocks = {} }
        conv.from_anthropic = b
    end
    return frame(b, doc)
end

return _M
