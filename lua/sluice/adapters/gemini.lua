-- Google Gemini's generateContent, backend side ("gemini" protocol; the preset of
-- control_plane/services/presets.py puts the model in the backend's URL:
-- .../v1beta/models/<model>, and the key in x-goog-api-key).
--
--   request   chat messages -> contents (role user/model, parts), system and
--             developer messages -> systemInstruction, sampling -> generationConfig
--             (maxOutputTokens, temperature, topP, stopSequences, ...), OpenAI tools ->
--             functionDeclarations, assistant tool_calls -> functionCall parts, tool
--             messages -> functionResponse parts; one text input (completions, the
--             envelopes) -> one user turn. POST <model>:generateContent, or
--             :streamGenerateContent?alt=sse when the caller streams.
--   response  candidates[0].content.parts: text (thoughts left out) and functionCall
--             -> outputs, tool_calls (the internal chat form, adapters/chat.lua:
--             {id, name, arguments}); finishReason STOP / MAX_TOKENS / safety ->
--             finish; usageMetadata promptTokenCount / candidatesTokenCount -> usage
--   stream    each SSE frame is a GenerateContentResponse: its text is a delta, a
--             functionCall arrives whole; `events` gives the internal events (text,
--             call, finish, usage) that adapters/stream.lua writes in the caller's API
--   errors    {"error": {"code", "message", "status"}}
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")

local type = type
local next = next
local ipairs = ipairs
local tostring = tostring
local concat = table.concat
local str_match = string.match

local json_null = cjson.null
local decode = cjson.decode
local is_list = common.is_list

local GENERATE = ":generateContent"
local STREAM = ":streamGenerateContent?alt=sse"
-- finishReason -> the internal finish (absent: "stop")
local FINISH = { STOP = "stop", MAX_TOKENS = "length", SAFETY = "content_filter",
                 RECITATION = "content_filter", BLOCKLIST = "content_filter",
                 PROHIBITED_CONTENT = "content_filter", SPII = "content_filter",
                 IMAGE_SAFETY = "content_filter" }
-- OpenAI tool_choice strings -> functionCallingConfig.mode
local MODES = { auto = "AUTO", none = "NONE", required = "ANY" }

local _M = {}

local function bad(msg, param)
    return nil, msg, param
end

-- One OpenAI content part -> a Gemini part, or nil, message.
local function part_of(p)
    if type(p) ~= "table" then
        return nil, "a content part must be an object"
    end
    if p.type == "text" and type(p.text) == "string" then
        return { text = p.text }
    end
    if p.type == "image_url" then
        local url = type(p.image_url) == "table" and p.image_url.url or p.image_url
        local mime, data = str_match(type(url) == "string" and url or "",
                                     "^data:([%w.+-]+/[%w.+-]+);base64,(.+)$")
        if not mime then
            return nil, "a gemini backend takes images as data: URLs (base64) only"
        end
        return { inlineData = { mimeType = mime, data = data } }
    end
    return nil, "content part type " .. tostring(p.type) .. " cannot go to a gemini backend"
end

local function parts_of(content, into)
    if type(content) == "string" then
        if content ~= "" then into[#into + 1] = { text = content } end
        return into
    end
    if content == nil or content == json_null then
        return into
    end
    if type(content) ~= "table" then
        return nil, "message content must be a string or a list of parts"
    end
    for _, p in ipairs(content) do
        local part, err = part_of(p)
        if not part then
            return nil, err
        end
        into[#into + 1] = part
    end
    return into
end

-- A tool result as the object functionResponse.response must be: a JSON object as it
-- is, anything else under "output" (Gemini's documented key for a plain result).
local function tool_result(content)
    local text = common.content_text(content) or ""
    local v = decode(text)
    if common.is_object(v) then
        return v
    end
    return { output = v ~= nil and v ~= json_null and v or text }
end

-- OpenAI chat messages -> contents and systemInstruction, or nil, message.
local function contents_of(messages)
    local contents, system, names = {}, {}, {}
    local last
    for _, m in ipairs(messages) do
        local role, parts, err = m.role, {}, nil
        if role == "system" or role == "developer" then
            local _, serr = parts_of(m.content, system)
            if serr then return nil, nil, serr end
        else
            if role == "user" then
                parts, err = parts_of(m.content, parts)
            elseif role == "assistant" then
                parts, err = parts_of(m.content, parts)
                for _, tc in ipairs(parts and type(m.tool_calls) == "table"
                                    and m.tool_calls or {}) do
                    local f = type(tc) == "table" and tc["function"]
                    if type(f) ~= "table" or type(f.name) ~= "string" then
                        return nil, nil, "a tool call needs a function name"
                    end
                    local args = f.arguments
                    if type(args) == "string" then
                        args = decode(args)
                    end
                    if not common.is_object(args) or args == json_null then
                        return nil, nil, "tool call arguments must be a JSON object"
                    end
                    names[tc.id or ""] = f.name
                    parts[#parts + 1] = { functionCall = { name = f.name, args = args } }
                end
                role = "model"
            elseif role == "tool" then
                local name = names[m.tool_call_id or ""]
                if not name then
                    return nil, nil, "a tool message's tool_call_id matches no earlier tool call"
                end
                parts = { { functionResponse = { name = name,
                                                 response = tool_result(m.content) } } }
                role = "user"
            else
                return nil, nil, "message role " .. tostring(role)
                                 .. " cannot go to a gemini backend"
            end
            if not parts then
                return nil, nil, err
            end
            if parts[1] ~= nil then
                if last and last.role == role then   -- one turn per role in a row
                    for _, p in ipairs(parts) do last.parts[#last.parts + 1] = p end
                else
                    last = { role = role, parts = parts }
                    contents[#contents + 1] = last
                end
            end
        end
    end
    if contents[1] == nil then
        return nil, nil, "the conversation has no user or assistant content"
    end
    return contents, system[1] and { parts = system } or nil
end

local function generation_config(params)
    local g = {}
    local max = params.max_completion_tokens or params.max_tokens or params.max_length
    if type(max) == "number" then g.maxOutputTokens = max end
    if type(params.temperature) == "number" then g.temperature = params.temperature end
    if type(params.top_p) == "number" then g.topP = params.top_p end
    if type(params.seed) == "number" then g.seed = params.seed end
    if type(params.presence_penalty) == "number" then
        g.presencePenalty = params.presence_penalty
    end
    if type(params.frequency_penalty) == "number" then
        g.frequencyPenalty = params.frequency_penalty
    end
    local stop = params.stop
    if type(stop) == "string" then
        g.stopSequences = { stop }
    elseif is_list(stop) then
        g.stopSequences = stop
    end
    local rf = params.response_format
    if type(rf) == "table" and (rf.type == "json_object" or rf.type == "json_schema") then
        g.responseMimeType = "application/json"
        local js = rf.json_schema
        if type(js) == "table" and type(js.schema) == "table" then
            g.responseJsonSchema = js.schema
        end
    end
    return next(g) and g or nil
end

-- OpenAI tools and tool_choice -> tools and toolConfig, or nil, nil, message.
local function tools_of(tools, choice)
    local decls = {}
    for _, t in ipairs(tools) do
        local f = type(t) == "table" and t.type == "function" and t["function"]
        if type(f) ~= "table" or type(f.name) ~= "string" then
            return nil, nil, "only function tools can go to a gemini backend"
        end
        decls[#decls + 1] = { name = f.name, description = f.description,
                              parameters = type(f.parameters) == "table" and f.parameters
                                           or nil }
    end
    local mode, allowed
    if type(choice) == "string" then
        mode = MODES[choice]
    elseif type(choice) == "table" and type(choice["function"]) == "table" then
        mode, allowed = "ANY", { choice["function"].name }
    end
    local config = mode and { functionCallingConfig = { mode = mode,
                                                        allowedFunctionNames = allowed } }
    return { { functionDeclarations = decls } }, config
end

-- The first of chat-form `params` a gemini backend has no place for: its name and
-- why; or nil. Also sluice.carry's, before limits count the request.
function _M.refuses(params)
    if type(params.n) == "number" and params.n > 1 then
        return "n", "a gemini backend answers one choice (n = 1)"
    end
    return nil
end

-- Internal request -> backend path and body, or nil, message, param (a 400).
function _M.request(ireq, _, model_name)
    local params = ireq.params or {}
    local refused, why = _M.refuses(params)
    if refused then
        return bad(why, refused)
    end
    local body = {}
    if ireq.messages then
        local contents, system, err = contents_of(ireq.messages)
        if not contents then
            return bad(err, "messages")
        end
        body.contents, body.systemInstruction = contents, system
    else
        if #ireq.inputs ~= 1 or type(ireq.inputs[1]) ~= "string" then
            return bad("model " .. model_name .. " is a chat model: send exactly one text input",
                       "input")
        end
        body.contents = { { role = "user", parts = { { text = ireq.inputs[1] } } } }
    end
    body.generationConfig = generation_config(params)
    local tools = ireq.tools or params.tools
    if is_list(tools) then
        local err
        body.tools, body.toolConfig, err = tools_of(tools, ireq.tool_choice or params.tool_choice)
        if err then
            return bad(err, "tools")
        end
    end
    return ireq.stream and STREAM or GENERATE, body
end

-- The text, the function calls (numbered from `base`) and the finish of one answer
-- or stream frame.
local function read(doc, base)
    local cand = type(doc.candidates) == "table" and doc.candidates[1]
    if type(cand) ~= "table" then
        return nil
    end
    local texts, calls = {}, nil
    local content = cand.content
    local parts = type(content) == "table" and content.parts
    for _, p in ipairs(type(parts) == "table" and parts or {}) do
        if type(p) == "table" then
            if type(p.text) == "string" and p.thought ~= true then
                texts[#texts + 1] = p.text
            elseif type(p.functionCall) == "table" and type(p.functionCall.name) == "string" then
                calls = calls or {}
                local fc = p.functionCall
                local n = #calls + 1
                local id = type(fc.id) == "string" and fc.id or "call_" .. (base + n)
                local args = type(fc.args) == "table" and cjson.encode(fc.args) or "{}"
                calls[n] = { id = id, name = fc.name, arguments = args }
            end
        end
    end
    local reason = cand.finishReason
    local finish = type(reason) == "string" and (FINISH[reason] or "stop") or nil
    if finish == "stop" and calls then
        finish = "tool_calls"
    end
    return concat(texts), calls, finish
end

local function usage_of(doc)
    local u = doc.usageMetadata
    if type(u) ~= "table" or type(u.promptTokenCount) ~= "number" then
        return nil
    end
    local completion = (type(u.candidatesTokenCount) == "number" and u.candidatesTokenCount
                        or 0)
                       + (type(u.thoughtsTokenCount) == "number" and u.thoughtsTokenCount or 0)
    return common.usage(u.promptTokenCount, completion)
end

local function blocked(doc)
    local fb = doc.promptFeedback
    local reason = type(fb) == "table" and fb.blockReason
    return "the backend answered no candidate"
           .. (type(reason) == "string" and " (prompt blocked: " .. reason .. ")" or "")
end

function _M.response(doc)
    local text, calls, finish = read(doc, 0)
    if not text then
        return nil, blocked(doc)
    end
    return { outputs = { text }, tool_calls = calls, finish = finish or "stop",
             usage = usage_of(doc) }
end

function _M.streams(ireq)
    return ireq.stream == true
end

-- One stream frame -> internal events (adapters/stream.lua), or nil, message. The
-- calls of a stream are numbered across its frames (conv.gemini_calls).
function _M.events(doc, conv)
    if doc.error ~= nil then
        return nil, _M.error_message(doc) or "the backend's stream reported an error"
    end
    local base = conv and conv.gemini_calls or 0
    local text, calls, finish = read(doc, base)
    local evs = {}
    if text and text ~= "" then
        evs[1] = { text = text }
    end
    for i, c in ipairs(calls or {}) do
        evs[#evs + 1] = { call = base + i - 1, id = c.id, name = c.name, args = c.arguments }
    end
    if calls and conv then
        conv.gemini_calls = base + #calls
    end
    if finish then
        evs[#evs + 1] = { finish = finish }
        local u = usage_of(doc)   -- each frame's usage is the stream's so far
        if u then
            evs[#evs + 1] = { usage = u }
        end
    end
    return evs
end

function _M.error_message(doc)
    local e = doc.error
    if type(e) == "table" and type(e.message) == "string" then
        return type(e.status) == "string" and e.status .. ": " .. e.message or e.message
    end
    return nil
end

return _M
