-- OpenAI Responses API, caller side: POST /v1/responses to a backend that does not
-- speak it (a chat backend, or any backend that answers text). A backend of protocol
-- openai_responses takes the body unchanged (endpoints.lua: native).
--
--   input (a string, or items: messages with input_text / input_image / input_file
--   parts, function_call, function_call_output), instructions, tools (function
--   tools), tool_choice, max_output_tokens, temperature, top_p, parallel_tool_calls,
--   text.format, user  -> the chat form (adapters/chat.lua)
--   metadata, store    -> echoed in the answer (store: false: nothing is stored)
--
-- What needs the backend's own memory is refused here, naming the parameter
-- (previous_response_id, conversation, background, prompt, item_reference items,
-- file_id inputs); so are tools other than function tools. Reasoning items sent
-- back are left out: a chat backend cannot take them. Streams: adapters/responses_stream.lua.
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")
local chat = require("sluice.adapters.chat")

local ngx = ngx
local ngx_time = ngx.time
local type = type
local pairs = pairs
local ipairs = ipairs
local tostring = tostring
local concat = table.concat
local str_gsub = string.gsub

local json_null = cjson.null
local array = chat.array

-- parameters only a backend that keeps responses can serve
local NEEDS_NATIVE = { "previous_response_id", "conversation", "background", "prompt" }

local _M = {}

local function present(v)
    return v ~= nil and v ~= json_null and v ~= false
end

-- Parameters the conversion cannot carry: nil, or param, message (a 400).
function _M.unsupported(doc)
    for _, k in ipairs(NEEDS_NATIVE) do
        if present(doc[k]) then
            return k, k .. " needs a backend that speaks the Responses API (this model's"
                      .. " backends are converted from it and keep no responses)"
        end
    end
    return nil
end

-- A backend's refusal names a chat-form field: the caller's own name for it, and the
-- message with it (response_format -> text.format, messages[N] -> input[M] or
-- instructions: common.caller_path, with the request `ireq`); nil stays nil.
local OWN = { response_format = "text.format", max_tokens = "max_output_tokens" }
local CALL_FIELD = { [".function.arguments"] = ".arguments", [".function.name"] = ".name",
                     [".id"] = ".call_id" }

local function call_path(_, k, tail)
    return "input[" .. k .. "]" .. (CALL_FIELD[tail] or "")
end

function _M.own_param(param, msg, ireq)
    if ireq then
        param = common.caller_path(ireq, param, "input", call_path)
    end
    local own = param and OWN[param]
    if not own then
        return param, msg
    end
    if type(msg) == "string" then
        msg = (str_gsub(msg, param, own, 1))
    end
    return own, msg
end

local function part_of(p, where)
    local t = p.type
    if t == "input_text" or t == "output_text" or t == "text" then
        return { type = "text", text = p.text }
    elseif t == "refusal" then
        return { type = "text", text = p.refusal }
    elseif t == "input_image" then
        if type(p.image_url) ~= "string" then
            return nil, where .. ".image_url",
                   "an input_image needs an image_url (file_id needs a Responses backend)"
        end
        return { type = "image_url", image_url = { url = p.image_url, detail = p.detail } }
    elseif t == "input_file" then
        if type(p.file_data) ~= "string" then
            return nil, where .. ".file_data",
                   "an input_file needs file_data (file_id needs a Responses backend)"
        end
        return { type = "file", file = { file_data = p.file_data, filename = p.filename } }
    end
    return nil, where .. ".type", "content part type must be one of input_text,"
                                  .. " input_image, input_file, output_text, refusal"
end

-- A message item's content in chat's form: a string, or parts (text-only parts of
-- a non-user turn joined into a string).
local function content_of(c, role, where, origin)
    if type(c) == "string" then
        return c
    end
    local parts, texts, plain = {}, {}, true
    for i, p in ipairs(c) do
        local part, param, msg = part_of(p, where .. "[" .. (i - 1) .. "]")
        if not part then
            return nil, param, msg
        end
        parts[i] = part
        origin[part] = i - 1
        if part.type == "text" then
            texts[#texts + 1] = part.text
        else
            plain = false
        end
    end
    if plain and (role ~= "user" or #parts == 1) then
        return concat(texts)
    end
    return parts
end

-- Responses `input` (+ instructions) -> chat messages and where each came from
-- (ireq.origin: common.caller_path), or nil, param, message.
local function messages_of(doc)
    local messages, origin = {}, {}
    local instructions = doc.instructions
    if type(instructions) == "string" then
        messages[1] = { role = "system", content = instructions }
        origin[messages[1]] = "instructions"
    end
    local input = doc.input
    if type(input) == "string" then
        local m = { role = "user", content = input }
        messages[#messages + 1] = m
        origin[m] = "input"
        return messages, origin
    end
    if type(input) ~= "table" then
        return nil, "input", "input must be a string or an array of items"
    end
    local calls_turn   -- the assistant turn that function_call items join
    for i, item in ipairs(input) do
        local where = "input[" .. (i - 1) .. "]"
        local t = item.type
        if t == "function_call" then
            if not calls_turn then
                calls_turn = { role = "assistant", content = json_null, tool_calls = {} }
                messages[#messages + 1] = calls_turn
                origin[calls_turn] = i - 1
            end
            local tc = calls_turn.tool_calls
            local call = { id = item.call_id, type = "function",
                           ["function"] = { name = item.name, arguments = item.arguments } }
            tc[#tc + 1] = call
            origin[call] = i - 1
        elseif t == "function_call_output" then
            calls_turn = nil
            local out = item.output
            if type(out) ~= "string" then
                out = common.content_text(out) or ""
            end
            local m = { role = "tool", tool_call_id = item.call_id, content = out }
            messages[#messages + 1] = m
            origin[m] = i - 1
        elseif t == "message" or (t == nil and item.role ~= nil) then
            local content, param, msg = content_of(item.content, item.role, where .. ".content",
                                                   origin)
            if content == nil then
                return nil, param, msg
            end
            local m = { role = item.role, content = content }
            messages[#messages + 1] = m
            origin[m] = i - 1
            -- an assistant's text then its calls: one chat turn
            calls_turn = item.role == "assistant" and type(content) == "string" and m or nil
            if calls_turn then m.tool_calls = {} end
        elseif t == "reasoning" then   -- luacheck: ignore 542
            -- the model's own reasoning sent back: a chat backend has no place for it
        elseif t == "item_reference" then
            return nil, where .. ".type", "item_reference needs a backend that speaks"
                                          .. " the Responses API (it keeps the items)"
        else
            return nil, where .. ".type", "input item type must be one of message,"
                                          .. " function_call, function_call_output, reasoning"
        end
    end
    for _, m in ipairs(messages) do   -- assistant turns that called nothing
        if m.tool_calls and m.tool_calls[1] == nil then
            m.tool_calls = nil
        end
    end
    return messages, origin
end

local function tools_of(list)
    if type(list) ~= "table" or list[1] == nil then
        return nil
    end
    local tools = {}
    for i, t in ipairs(list) do
        if t.type ~= "function" then
            return nil, "tools[" .. (i - 1) .. "].type",
                   "only function tools convert to this model's backends (" .. tostring(t.type)
                   .. " needs a Responses backend)"
        end
        tools[i] = { type = "function", ["function"] = {
            name = t.name, description = t.description, parameters = t.parameters,
            strict = t.strict } }
    end
    return tools
end

local function tool_choice_of(tc)
    if type(tc) == "string" then
        return tc
    end
    if type(tc) == "table" then
        if tc.type == "function" and type(tc.name) == "string" then
            return { type = "function", ["function"] = { name = tc.name } }
        end
        return nil, "tool_choice", "tool_choice must be auto, none, required or a"
                                   .. ' {"type": "function", "name": ...}'
    end
    return nil
end

local function format_of(text)
    local f = type(text) == "table" and text.format
    if type(f) ~= "table" or f.type == "text" then
        return nil
    end
    if f.type == "json_object" then
        return { type = "json_object" }
    end
    return { type = "json_schema", json_schema = { name = f.name, schema = f.schema,
                                                   strict = f.strict,
                                                   description = f.description } }
end

-- Responses request `doc`'s generation parameters in chat's names: the chat form's
-- params, and what sluice.carry checks against a backend before limits count it.
function _M.params_of(doc)
    local max = doc.max_output_tokens
    local params = {
        temperature = doc.temperature, top_p = doc.top_p,
        max_tokens = max ~= json_null and max or nil,
        parallel_tool_calls = doc.parallel_tool_calls,
        response_format = format_of(doc.text),
        user = doc.safety_identifier or doc.user,
    }
    for k, v in pairs(params) do
        if v == json_null then params[k] = nil end
    end
    return params
end

-- Caller body -> chat-form internal request, or nil, message, param (a 400).
function _M.decode(_, doc, model)
    local param, msg = _M.unsupported(doc)
    if param then
        return nil, msg, param
    end
    local messages, origin
    messages, origin, msg = messages_of(doc)
    if not messages then
        return nil, msg, origin
    end
    local last = ""
    for i = #messages, 1, -1 do
        if messages[i].role == "user" then
            last = common.content_text(messages[i].content) or ""
            break
        end
    end
    local tools, tool_choice
    tools, param, msg = tools_of(doc.tools)
    if param then return nil, msg, param end
    tool_choice, param, msg = tool_choice_of(doc.tool_choice)
    if param then return nil, msg, param end
    return { kind = "chat", chat = true, api = "responses", model = model,
             messages = messages, tools = tools, tool_choice = tools and tool_choice,
             params = _M.params_of(doc), stream = doc.stream == true, include_usage = true,
             origin = origin,
             inputs = { last }, meta = { doc = doc } }
end

function _M.response_id()
    return "resp_" .. (ngx.var.sl_id or "")
end

-- Usage in Responses' names, from chat's.
function _M.usage(u)
    local p, c = u.prompt_tokens or 0, u.completion_tokens or 0
    local details = type(u.prompt_tokens_details) == "table" and u.prompt_tokens_details
    return { input_tokens = p, output_tokens = c, total_tokens = u.total_tokens or p + c,
             input_tokens_details = { cached_tokens = details and details.cached_tokens or 0 },
             output_tokens_details = { reasoning_tokens = 0 } }
end

-- The response object around `output` (items) with `status`; its echoed fields from
-- the caller's body.
function _M.object(ireq, status, output, usage, finish)
    local doc = ireq.meta.doc
    local function echo(k, default)
        local v = doc[k]
        if v == nil then return default end
        return v
    end
    local tools = doc.tools
    return {
        id = _M.response_id(), object = "response", created_at = ngx_time(),
        status = status, model = ireq.model, output = array(output),
        error = json_null,
        incomplete_details = finish == "length" and { reason = "max_output_tokens" } or json_null,
        instructions = echo("instructions", json_null),
        max_output_tokens = echo("max_output_tokens", json_null),
        metadata = echo("metadata", {}),
        parallel_tool_calls = echo("parallel_tool_calls", true),
        previous_response_id = json_null,
        store = false,
        temperature = echo("temperature", 1), top_p = echo("top_p", 1),
        text = echo("text", { format = { type = "text" } }),
        tool_choice = echo("tool_choice", "auto"),
        tools = type(tools) == "table" and array(tools) or array(),
        truncation = "disabled",
        usage = usage and _M.usage(usage) or json_null,
    }
end

-- Output items of a whole internal response.
function _M.items(ires)
    local items = {}
    local text = common.text(ires.outputs[1])
    local id = ngx.var.sl_id or ""
    if text ~= "" or not ires.tool_calls then
        items[1] = { type = "message", id = "msg_" .. id, status = "completed",
                     role = "assistant",
                     content = array({ { type = "output_text", text = text,
                                         annotations = array() } }) }
    end
    for i, c in ipairs(ires.tool_calls or {}) do
        items[#items + 1] = { type = "function_call", id = "fc_" .. id .. "_" .. i,
                              call_id = c.id, name = c.name, arguments = c.arguments,
                              status = "completed" }
    end
    return items
end

-- Internal response -> the Responses answer.
function _M.respond(ireq, ires)
    local status = ires.finish == "length" and "incomplete" or "completed"
    return _M.object(ireq, status, _M.items(ires), common.text_usage(ireq, ires), ires.finish)
end

-- The answer's JSON text (its empty lists as []).
_M.encode = chat.encode

-- Streams to the caller: Responses' events (adapters/stream.lua drives it).
_M.emitter = require("sluice.adapters.responses_stream")

return _M
