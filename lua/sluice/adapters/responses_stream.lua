-- Responses' semantic stream events for a Responses caller whose backend speaks
-- something else: the internal events of adapters/chat.lua (from a backend's stream,
-- frame by frame, or from a whole answer) as
--
--   response.created, response.in_progress
--   per output item, one after the other:
--     message:       response.output_item.added, response.content_part.added,
--                    response.output_text.delta ..., response.output_text.done,
--                    response.content_part.done, response.output_item.done
--     function_call: response.output_item.added,
--                    response.function_call_arguments.delta ...,
--                    response.function_call_arguments.done, response.output_item.done
--   response.completed (or response.incomplete) with the whole response and usage
--
-- each as `event: <type>` and `data: <json>` with its sequence_number. The emitter's
-- state rides in conv.rs (adapters/stream.lua calls start, event, finish); the
-- response object comes from the caller adapter (conv.caller: adapters/responses.lua).
local common = require("sluice.adapters.common")

local ngx = ngx
local concat = table.concat
local chat = require("sluice.adapters.chat")
local encode = chat.encode
local array = chat.array

local _M = {}

local function emit(st, out, ev)
    ev.sequence_number = st.seq
    st.seq = st.seq + 1
    out[#out + 1] = "event: " .. ev.type .. "\ndata: " .. encode(ev) .. "\n\n"
end

-- The open item's last events.
local function close(st, out)
    local i = st.open
    if not i then
        return
    end
    st.open = nil
    local item = st.items[i]
    if item.type == "message" then
        local text = concat(st.texts)
        st.texts = {}
        local part = { type = "output_text", text = text, annotations = array() }
        emit(st, out, { type = "response.output_text.done", item_id = item.id,
                        output_index = i - 1, content_index = 0, text = text,
                        logprobs = array() })
        emit(st, out, { type = "response.content_part.done", item_id = item.id,
                        output_index = i - 1, content_index = 0, part = part })
        item.content = array({ part })
    else
        emit(st, out, { type = "response.function_call_arguments.done", item_id = item.id,
                        output_index = i - 1, name = item.name, arguments = item.arguments })
    end
    item.status = "completed"
    emit(st, out, { type = "response.output_item.done", output_index = i - 1, item = item })
end

local function open_message(st, out)
    local items = st.items
    local i = #items + 1
    local item = { type = "message", id = "msg_" .. st.id .. "_" .. i, status = "in_progress",
                   role = "assistant", content = array() }
    items[i] = item
    st.open = i
    emit(st, out, { type = "response.output_item.added", output_index = i - 1, item = item })
    emit(st, out, { type = "response.content_part.added", item_id = item.id,
                    output_index = i - 1, content_index = 0,
                    part = { type = "output_text", text = "", annotations = array() } })
end

function _M.start(conv)
    local st = { seq = 0, items = {}, texts = {}, calls = {}, id = ngx.var.sl_id or "",
                 all = {} }
    conv.rs = st
    local out = {}
    local obj = conv.caller.object(conv.ireq, "in_progress", {}, nil)
    emit(st, out, { type = "response.created", response = obj })
    emit(st, out, { type = "response.in_progress", response = obj })
    return concat(out)
end

function _M.event(conv, ev)
    local st = conv.rs
    local out = {}
    if ev.text then
        local item = st.open and st.items[st.open]
        if not item or item.type ~= "message" then
            close(st, out)
            open_message(st, out)
            item = st.items[st.open]
        end
        st.texts[#st.texts + 1] = ev.text
        st.all[#st.all + 1] = ev.text
        emit(st, out, { type = "response.output_text.delta", item_id = item.id,
                        output_index = st.open - 1, content_index = 0, delta = ev.text,
                        logprobs = array() })
    elseif ev.call then
        local i = st.calls[ev.call]
        if not i then
            close(st, out)
            local items = st.items
            i = #items + 1
            items[i] = { type = "function_call", id = "fc_" .. st.id .. "_" .. i,
                         call_id = ev.id or ("call_" .. st.id .. "_" .. i),
                         name = ev.name or "", arguments = "", status = "in_progress" }
            st.calls[ev.call] = i
            st.open = i
            emit(st, out, { type = "response.output_item.added", output_index = i - 1,
                            item = items[i] })
        end
        local item = st.items[i]
        local args = ev.args or ""
        if args ~= "" then
            item.arguments = item.arguments .. args
            st.all[#st.all + 1] = " " .. args
            emit(st, out, { type = "response.function_call_arguments.delta",
                            item_id = item.id, output_index = i - 1, delta = args })
        end
    elseif ev.finish then
        st.finish = ev.finish
    elseif ev.usage then
        st.usage = ev.usage
    end
    return concat(out)
end

function _M.finish(conv)
    local st = conv.rs
    local out = {}
    close(st, out)
    local ireq = conv.ireq
    local usage = common.text_usage(ireq, { outputs = { concat(st.all) }, usage = st.usage })
    local incomplete = st.finish == "length"
    local obj = conv.caller.object(ireq, incomplete and "incomplete" or "completed",
                                 st.items, usage, st.finish)
    emit(st, out, { type = incomplete and "response.incomplete" or "response.completed",
                    response = obj })
    return concat(out)
end

-- An error once the 200 has gone out: an `error` event (the OpenAI client raises on
-- its `error` field).
function _M.error(body)
    return "event: error\ndata: " .. body .. "\n\n"
end

return _M
