-- Anthropic Messages streams, both sides.
--
-- Caller side: the events an Anthropic client reads, made from a converted backend's
-- frames (sse.payloads, the backend adapter's frame) or from a whole answer:
--   message_start, then per content block content_block_start, content_block_delta
--   (text_delta, input_json_delta), content_block_stop; message_delta (stop_reason,
--   usage), message_stop. A failure after the 200 is an `error` event.
-- A tool call's arguments are sent in one input_json_delta when its block closes,
-- once they parse as a JSON object: a backend's broken arguments become an error
-- event, never a half-parsed input in the client.
--
-- Backend side (frame): an `anthropic` backend's events into the stream events of
-- adapters/sse.lua ({ text, tools, finish, usage }), its tool arguments checked the
-- same way when their block stops. State rides in the request's conv table.
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")
local sse = require("sluice.adapters.sse")
local ac = require("sluice.adapters.anthropic_convert")

local ngx = ngx
local ngx_log = ngx.log
local ERR = ngx.ERR
local type = type
local tostring = tostring
local ipairs = ipairs
local concat = table.concat

local encode = cjson.encode
local decode = cjson.decode

local _M = {}

local function event(name, obj)
    return "event: " .. name .. "\ndata: " .. encode(obj) .. "\n\n"
end

-- An error after the 200: `body` is the error template (sluice.errors), already in
-- Anthropic's shape for an Anthropic caller.
function _M.error_event(body)
    return "event: error\ndata: " .. body .. "\n\n"
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

-- Close the open block: a tool block's arguments go out now, checked.
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
        out[#out + 1] = event("content_block_delta", {
            type = "content_block_delta", index = open,
            delta = { type = "input_json_delta", partial_json = args } })
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

-- The caller's stream state, made on first use. conv.texts (its texts, shared) is
-- what sluice.relay reads to know a frame converted: a tool call's start adds "".
local function state(conv)
    local s = conv.anthropic
    if not s then
        s = { n = -1, tools = {}, texts = {} }
        conv.anthropic = s
        conv.texts = s.texts
    end
    return s
end

-- One stream event (a string: text; a table: sse.lua's event) as Anthropic events
-- appended to `out`; nil, message on failure.
function _M.write(conv, ev, out)
    local s = state(conv)
    if type(ev) == "string" then
        ev = { text = ev }
    end
    if ev.usage then s.usage = ev.usage end
    if ev.finish then s.finish = ev.finish end
    local text = ev.text
    if type(text) == "string" and text ~= "" then
        s.texts[#s.texts + 1] = text
        if s.kind ~= "text" or not s.open then
            local ok, err = open_block(s, "text", { type = "text", text = "" }, out)
            if not ok then return nil, err end
        end
        out[#out + 1] = event("content_block_delta", {
            type = "content_block_delta", index = s.open,
            delta = { type = "text_delta", text = text } })
    end
    for _, t in ipairs(ev.tools or {}) do
        local k = t.index or 0
        if not s.tools[k] then
            local ok, err = open_block(s, "tool", { type = "tool_use", id = t.id or ("call_" .. k),
                                                    name = t.name or "", input = {} }, out)
            if not ok then return nil, err end
            s.tools[k] = s.n
            s.args = {}
            s.calls = true
            s.texts[#s.texts + 1] = ""
        end
        if s.tools[k] ~= s.open then
            return nil, "the backend interleaved the arguments of parallel tool calls"
        end
        if type(t.arguments) == "string" then
            s.args[#s.args + 1] = t.arguments
        end
    end
    return true
end

-- The end of a stream: the open block closed, message_delta and message_stop.
function _M.ending(conv, ires)
    local s = state(conv)
    local out = {}
    local ok, err = close(s, out)
    if not ok then
        return nil, err
    end
    local ireq = conv.ireq
    ires = ires or { outputs = { concat(s.texts) }, usage = s.usage }
    local stop = s.calls and "tool_use" or ac.STOP[s.finish or ires.finish] or "end_turn"
    out[#out + 1] = event("message_delta", { type = "message_delta",
                                             delta = { stop_reason = stop, stop_sequence = cjson.null },
                                             usage = ac.usage_of(ireq, ires) })
    out[#out + 1] = 'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    return concat(out)
end

local function message_id()
    return "msg_" .. (ngx.var.sl_id or "")
end
_M.message_id = message_id

-- Body filter for a streaming backend, as adapters/sse.lua's frames for OpenAI callers.
function _M.frames(conv, data, eof, fail)
    local out = {}
    if not conv.started then
        conv.started = true
        state(conv)   -- conv.texts, before sluice.relay looks
        out[1] = message_start(conv.ireq, message_id())
    end
    local payloads, err = sse.payloads(conv, data)
    for i = 1, #payloads do
        if conv.failed then break end
        local ev, ferr = sse.read(conv.backend, payloads[i], conv)
        if ev == nil then
            err = ferr
            break
        end
        if ev then
            local ok, werr = _M.write(conv, ev, out)
            if not ok then
                err = werr
                break
            end
        end
    end
    if eof and not err and not conv.failed then
        local tail, terr = _M.ending(conv)
        out[#out + 1] = tail
        err = terr
    end
    if err and not conv.failed then
        ngx_log(ERR, "backend stream failed: ", err)
        conv.failed = err
        out[#out + 1] = _M.error_event(fail(err))
    end
    return concat(out)
end

-- A whole internal response as an Anthropic stream.
function _M.synthesize(ireq, ires, conv)
    local out = { message_start(ireq, message_id()) }
    local tools = {}
    for i, call in ipairs(ires.tool_calls or {}) do
        local f = call["function"] or {}
        tools[i] = { index = i - 1, id = call.id, name = f.name, arguments = f.arguments }
    end
    local ok, err = _M.write(conv, { text = common.text(ires.outputs[1]), tools = tools,
                                     finish = ires.finish, usage = ires.usage }, out)
    local tail
    if ok then
        tail, err = _M.ending(conv, ires)
    end
    if not tail then
        return nil, err
    end
    out[#out + 1] = tail
    return concat(out)
end

-- ---- backend side ---------------------------------------------------------------

local function backend_state(conv)
    local b = conv.from_anthropic
    if not b then
        b = { tool = -1, blocks = {} }
        conv.from_anthropic = b
    end
    return b
end

-- One event of an `anthropic` backend's stream -> sse.lua's stream event, false
-- (nothing for the caller), or nil, message.
function _M.frame(doc, conv)
    local b = backend_state(conv)
    local t = doc.type
    if t == "content_block_delta" then
        local d = doc.delta
        if type(d) ~= "table" then
            return false
        end
        if d.type == "text_delta" then
            return d.text or false
        elseif d.type == "input_json_delta" then
            local block = b.blocks[doc.index]
            if not block then
                return nil, "a tool argument delta outside a tool_use block"
            end
            block.args[#block.args + 1] = d.partial_json or ""
            return { tools = { { index = block.tool, arguments = d.partial_json or "" } } }
        end
        return false   -- thinking and signature deltas stay with the backend
    elseif t == "content_block_start" then
        local cb = doc.content_block
        if type(cb) ~= "table" then
            return false
        end
        if cb.type == "tool_use" then
            b.tool = b.tool + 1
            b.blocks[doc.index] = { tool = b.tool, args = {} }
            return { tools = { { index = b.tool, id = cb.id, name = cb.name, arguments = "" } } }
        elseif cb.type == "text" and type(cb.text) == "string" and cb.text ~= "" then
            return cb.text
        end
        return false
    elseif t == "content_block_stop" then
        local block = b.blocks[doc.index]
        if block and not args_ok(concat(block.args)) then
            return nil, "the backend streamed tool arguments that are not a JSON object"
        end
        return false
    elseif t == "message_start" then
        local m = doc.message
        local u = type(m) == "table" and m.usage
        if type(u) == "table" then
            local _, prompt = ac.usage({ input_tokens = u.input_tokens, output_tokens = 0,
                                         cache_read_input_tokens = u.cache_read_input_tokens,
                                         cache_creation_input_tokens = u.cache_creation_input_tokens })
            b.prompt = prompt
        end
        return false
    elseif t == "message_delta" then
        local d = doc.delta
        local ev = { usage = ac.usage(doc.usage, b.prompt) }
        if type(d) == "table" and d.stop_reason then
            ev.finish = ac.FINISH[d.stop_reason] or "stop"
        end
        return ev
    elseif t == "error" then
        local e = doc.error
        return nil, "the backend's stream failed: "
                    .. (type(e) == "table" and tostring(e.message) or "error event")
    end
    return false   -- ping, message_stop
end

return _M
