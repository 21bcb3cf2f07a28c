-- Strict requests of the Anthropic Messages API (POST /v1/messages and
-- /v1/messages/count_tokens), as sluice/strict.lua checks OpenAI's: every field the
-- protocol defines, typed and in range, the first bad one named as `param`, before
-- any limit counts the request.
--
--   max_tokens      required (messages only), an integer from 1 to the model's limit
--   messages        non-empty; role user or assistant; content a string or blocks:
--                   text, image (base64 jpeg/png/gif/webp up to MAX_IMAGE bytes, or a
--                   url), tool_use (assistant), tool_result (user, answering an
--                   earlier tool_use), thinking and redacted_thinking (assistant)
--   system          a string or text blocks
--   tools           name (1-64 of letters, digits, _ and -), input_schema an object
--   tool_choice     {"type": auto | any | none | tool (with "name")}
--   stop_sequences  strings; temperature 0..1, top_p 0..1, top_k >= 0, stream boolean
--
-- Pure Lua (cjson only): tests/lua/test_strict_anthropic.lua runs it under luajit.
local cjson = require("cjson.safe")

local type = type
local floor = math.floor
local str_find = string.find

local NULL = cjson.null

local MAX_IMAGE = 5 * 1024 * 1024   -- bytes of one image, as Anthropic's API allows
local MAX_IMAGE_B64 = math.ceil(MAX_IMAGE / 3) * 4
local ROLES = { user = true, assistant = true }
local BLOCKS = { text = true, image = true, tool_use = true, tool_result = true,
                 thinking = true, redacted_thinking = true }
local BLOCK_NAMES = "text, image, tool_use, tool_result, thinking, redacted_thinking"
local ASSISTANT_ONLY = { tool_use = true, thinking = true, redacted_thinking = true }
local MEDIA = { ["image/jpeg"] = true, ["image/png"] = true, ["image/gif"] = true,
                ["image/webp"] = true }
local CHOICES = { auto = true, any = true, none = true, tool = true }

local jv = require("sluice.json_values")
local absent, is_number, is_array, is_object = jv.absent, jv.is_number, jv.is_array, jv.is_object
local range = jv.range

local _M = { MAX_IMAGE = MAX_IMAGE }

local function image(b, at)
    local src = b.source
    if not is_object(src) then
        return at .. ".source", "an image needs a source object"
    end
    if src.type == "base64" then
        if not MEDIA[src.media_type] then
            return at .. ".source.media_type",
                   "media_type must be image/jpeg, image/png, image/gif or image/webp"
        end
        if type(src.data) ~= "string" then
            return at .. ".source.data", "data must be a base64 string"
        end
        if #src.data > MAX_IMAGE_B64 then
            return at .. ".source.data", "an image may be at most " .. MAX_IMAGE .. " bytes"
        end
    elseif src.type == "url" then
        if type(src.url) ~= "string" then
            return at .. ".source.url", "url must be a string"
        end
    else
        return at .. ".source.type", 'source type must be "base64" or "url"'
    end
end

local function tool_result_content(c, at)
    if absent(c) or type(c) == "string" then
        return nil
    end
    if not is_array(c) then
        return at .. ".content", "a tool result's content must be a string or blocks"
    end
    for k = 1, #c do
        local b = c[k]
        local where = at .. ".content[" .. (k - 1) .. "]"
        if not is_object(b) or (b.type ~= "text" and b.type ~= "image") then
            return where .. ".type", "a tool result holds text and image blocks"
        end
        if b.type == "text" and type(b.text) ~= "string" then
            return where .. ".text", "a text block needs a string text"
        end
        if b.type == "image" then
            local p, msg = image(b, where)
            if p then return p, msg end
        end
    end
end

-- One block at `at` of a `role` turn; `uses`: tool_use ids seen so far.
local function block(b, role, at, uses)
    if not is_object(b) then
        return at, "a content block must be an object"
    end
    local t = b.type
    if not BLOCKS[t] then
        return at .. ".type", "content block type must be one of " .. BLOCK_NAMES
    end
    if ASSISTANT_ONLY[t] and role ~= "assistant" then
        return at .. ".type", "a " .. t .. " block belongs to an assistant turn"
    end
    if t == "text" then
        if type(b.text) ~= "string" then
            return at .. ".text", "a text block needs a string text"
        end
    elseif t == "image" then
        return image(b, at)
    elseif t == "tool_use" then
        if type(b.id) ~= "string" or b.id == "" then
            return at .. ".id", "a tool_use block needs a string id"
        end
        if type(b.name) ~= "string" then
            return at .. ".name", "a tool_use block needs a string name"
        end
        if not is_object(b.input) then
            return at .. ".input", "a tool_use block's input must be an object"
        end
        uses[b.id] = true
    elseif t == "tool_result" then
        if role ~= "user" then
            return at .. ".type", "a tool_result block belongs to a user turn"
        end
        if type(b.tool_use_id) ~= "string" or not uses[b.tool_use_id] then
            return at .. ".tool_use_id", "a tool_result must answer an earlier tool_use by its id"
        end
        return tool_result_content(b.content, at)
    end
end

local function messages(list)
    if not is_array(list) or #list == 0 then
        return "messages", "messages must be a non-empty array"
    end
    local uses = {}
    for i = 1, #list do
        local m = list[i]
        local at = "messages[" .. (i - 1) .. "]"
        if not is_object(m) then
            return at, "a message must be an object"
        end
        if not ROLES[m.role] then
            return at .. ".role", "role must be user or assistant"
        end
        local c = m.content
        if type(c) ~= "string" then
            if not is_array(c) then
                return at .. ".content", "content must be a string or an array of blocks"
            end
            for j = 1, #c do
                local p, msg = block(c[j], m.role, at .. ".content[" .. (j - 1) .. "]", uses)
                if p then return p, msg end
            end
        end
    end
end

local function system(s)
    if absent(s) or type(s) == "string" then
        return nil
    end
    if not is_array(s) then
        return "system", "system must be a string or an array of text blocks"
    end
    for i = 1, #s do
        local b = s[i]
        if not is_object(b) or b.type ~= "text" or type(b.text) ~= "string" then
            return "system[" .. (i - 1) .. "]", "system blocks must be text blocks"
        end
    end
end

local function tools(list)
    if absent(list) then
        return nil
    end
    if not is_array(list) then
        return "tools", "tools must be an array"
    end
    for i = 1, #list do
        local t = list[i]
        local at = "tools[" .. (i - 1) .. "]"
        if not is_object(t) then
            return at, "a tool must be an object"
        end
        local name = t.name
        if type(name) ~= "string" or #name == 0 or #name > 64 or str_find(name, "[^%w_-]") then
            return at .. ".name", "a tool name must be 1 to 64 letters, digits, _ or -"
        end
        local custom = t.type == nil or t.type == NULL or t.type == "custom"
        if custom and not is_object(t.input_schema) then
            return at .. ".input_schema", "input_schema must be a JSON Schema object"
        end
        if not absent(t.description) and type(t.description) ~= "string" then
            return at .. ".description", "description must be a string"
        end
    end
end

local function tool_choice(tc)
    if absent(tc) then
        return nil
    end
    if not is_object(tc) or not CHOICES[tc.type] then
        return "tool_choice", 'tool_choice must be {"type": "auto" | "any" | "none" | "tool"}'
    end
    if tc.type == "tool" and type(tc.name) ~= "string" then
        return "tool_choice.name", 'tool_choice "tool" needs the tool\'s name'
    end
end

-- Checks `doc`, a body of /v1/messages (`counting`: of count_tokens, which takes no
-- max_tokens) for a model whose output limit is `limit`. Returns nil, or the bad
-- param's name and a message.
function _M.check(doc, limit, counting)
    if not counting then
        local n = doc.max_tokens
        if absent(n) then
            return "max_tokens", "max_tokens is required"
        end
        if not is_number(n) or floor(n) ~= n or n < 1 or n > limit then
            return "max_tokens", "max_tokens must be an integer from 1 to " .. limit
                                 .. " (this model's limit)"
        end
    end
    local p, msg = messages(doc.messages)
    if p then return p, msg end
    p, msg = system(doc.system)
    if p then return p, msg end
    p, msg = tools(doc.tools)
    if p then return p, msg end
    p, msg = tool_choice(doc.tool_choice)
    if p then return p, msg end
    if counting then
        return nil
    end
    local stop = doc.stop_sequences
    if not absent(stop) then
        if not is_array(stop) then
            return "stop_sequences", "stop_sequences must be an array of strings"
        end
        for i = 1, #stop do
            if type(stop[i]) ~= "string" then
                return "stop_sequences", "stop_sequences must be an array of strings"
            end
        end
    end
    p, msg = range(doc, "temperature", 0, 1)
    if p then return p, msg end
    p, msg = range(doc, "top_p", 0, 1)
    if p then return p, msg end
    local k = doc.top_k
    if not absent(k) and (not is_number(k) or floor(k) ~= k or k < 0) then
        return "top_k", "top_k must be an integer of 0 or more"
    end
    if not absent(doc.stream) and type(doc.stream) ~= "boolean" then
        return "stream", "stream must be true or false"
    end
    if not absent(doc.metadata) and not is_object(doc.metadata) then
        return "metadata", "metadata must be an object"
    end
    return nil
end

return _M
