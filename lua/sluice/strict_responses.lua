-- Strict requests for POST /v1/responses (sluice.strict calls check): the fields of
-- the Responses API checked for type and range before anything is counted or
-- forwarded, the first bad one named as OpenAI names it ("input[2].call_id").
--
--   input            required: a string or an array of items: messages (role user,
--                    assistant, system or developer; content a string or parts:
--                    input_text, input_image, input_file, output_text, refusal),
--                    function_call, function_call_output (its call_id made by a
--                    function_call of the same input, unless previous_response_id
--                    says where it was made), reasoning, item_reference
--   instructions, previous_response_id   strings
--   tools            function tools (name, parameters, description, strict) and
--                    other tool types (their names; sluice.carry says where they go)
--   tool_choice      none, auto, required, or an object with a type
--   max_output_tokens  an integer from 1 to the model's limit
--   temperature 0..2, top_p 0..1; stream, store, parallel_tool_calls booleans
--   metadata         up to 16 string values, keys up to 64 characters
--   text.format      text, json_object, or json_schema with a name and a schema
--
-- JSON null is taken as absent. Pure Lua (sluice.json_values): tests/lua/test_strict_responses.lua.

local type = type
local floor = math.floor
local pairs = pairs
local ipairs = ipairs
local str_find = string.find


local ROLES = { user = true, assistant = true, system = true, developer = true }
local PARTS = { input_text = "text", output_text = "text", input_image = true,
                input_file = true, refusal = "refusal" }
local ITEMS = { message = true, function_call = true, function_call_output = true,
                reasoning = true, item_reference = true }
local CHOICES = { none = true, auto = true, required = true }
local FORMATS = { text = true, json_object = true, json_schema = true }
local BOOLEANS = { "stream", "store", "parallel_tool_calls", "background" }
local STRINGS = { "instructions", "previous_response_id", "user", "safety_identifier" }
local MAX_METADATA = 16

local jv = require("sluice.json_values")
local absent, is_number, is_array, is_object = jv.absent, jv.is_number, jv.is_array, jv.is_object
local range = jv.range

local _M = {}

local function parts(c, where)
    if type(c) == "string" then
        return nil
    end
    if not is_array(c) then
        return where, "content must be a string or an array of content parts"
    end
    for i = 1, #c do
        local p = c[i]
        local at = where .. "[" .. (i - 1) .. "]"
        if not is_object(p) or not PARTS[p.type] then
            return at .. ".type", "content part type must be one of input_text, input_image,"
                                  .. " input_file, output_text, refusal"
        end
        local field = PARTS[p.type]
        if field ~= true and type(p[field]) ~= "string" then
            return at .. "." .. field, "a " .. p.type .. " part needs a string " .. field
        end
        if p.type == "input_image" and type(p.image_url) ~= "string"
           and type(p.file_id) ~= "string" then
            return at .. ".image_url", "an input_image needs an image_url or a file_id"
        end
    end
    return nil
end

local function input(list, stored)
    if type(list) == "string" then
        return nil
    end
    if absent(list) then
        return "input", "input is required"
    end
    if not is_array(list) or #list == 0 then
        return "input", "input must be a string or a non-empty array of items"
    end
    local calls = {}
    for i = 1, #list do
        local item = list[i]
        local at = "input[" .. (i - 1) .. "]"
        if not is_object(item) then
            return at, "an input item must be an object"
        end
        local t = item.type
        if absent(t) and item.role ~= nil then
            t = "message"
        end
        if not ITEMS[t] then
            return at .. ".type", "input item type must be one of message, function_call,"
                                  .. " function_call_output, reasoning, item_reference"
        end
        if t == "message" then
            if not ROLES[item.role] then
                return at .. ".role", "role must be one of user, assistant, system, developer"
            end
            local p, msg = parts(item.content, at .. ".content")
            if p then return p, msg end
        elseif t == "function_call" then
            for _, k in ipairs({ "call_id", "name", "arguments" }) do
                if type(item[k]) ~= "string" then
                    return at .. "." .. k, "a function_call needs a string " .. k
                end
            end
            calls[item.call_id] = true
        elseif t == "function_call_output" then
            if type(item.call_id) ~= "string" then
                return at .. ".call_id", "a function_call_output needs a string call_id"
            end
            if not calls[item.call_id] and not stored then
                return at .. ".call_id", "no function_call before it has call_id "
                                         .. item.call_id
            end
            local out = item.output
            if type(out) ~= "string" and not is_array(out) then
                return at .. ".output", "output must be a string or an array of content parts"
            end
        end
    end
    return nil
end

local function tools(list)
    if absent(list) then
        return nil
    end
    if not is_array(list) then
        return "tools", "tools must be an array of tools"
    end
    for i = 1, #list do
        local t = list[i]
        local at = "tools[" .. (i - 1) .. "]"
        if not is_object(t) or type(t.type) ~= "string" then
            return at .. ".type", "a tool must be an object with a string type"
        end
        if t.type == "function" then
            local name = t.name
            if type(name) ~= "string" or #name == 0 or #name > 64
               or str_find(name, "[^%w_-]") then
                return at .. ".name", "a function name must be 1 to 64 letters, digits, _ or -"
            end
            if not absent(t.parameters) and not is_object(t.parameters) then
                return at .. ".parameters", "parameters must be a JSON Schema object"
            end
            if not absent(t.description) and type(t.description) ~= "string" then
                return at .. ".description", "description must be a string"
            end
            if not absent(t.strict) and type(t.strict) ~= "boolean" then
                return at .. ".strict", "strict must be true or false"
            end
        end
    end
    return nil
end

local function scalars(doc, limit)
    local p, msg = range(doc, "temperature", 0, 2)
    if p then return p, msg end
    p, msg = range(doc, "top_p", 0, 1)
    if p then return p, msg end
    local m = doc.max_output_tokens
    if not absent(m) and (not is_number(m) or floor(m) ~= m or m < 1 or m > limit) then
        return "max_output_tokens", "max_output_tokens must be an integer from 1 to "
                                    .. limit .. " (this model's limit)"
    end
    for _, k in ipairs(BOOLEANS) do
        if not absent(doc[k]) and type(doc[k]) ~= "boolean" then
            return k, k .. " must be true or false"
        end
    end
    for _, k in ipairs(STRINGS) do
        if not absent(doc[k]) and type(doc[k]) ~= "string" then
            return k, k .. " must be a string"
        end
    end
    return nil
end

local function metadata(md)
    if absent(md) then
        return nil
    end
    if not is_object(md) then
        return "metadata", "metadata must be an object of strings"
    end
    local n = 0
    for k, v in pairs(md) do
        n = n + 1
        if type(v) ~= "string" or #v > 512 or #k > 64 or n > MAX_METADATA then
            return "metadata", "metadata holds up to " .. MAX_METADATA .. " string values"
                               .. " (keys up to 64 characters, values up to 512)"
        end
    end
    return nil
end

local function choice_and_text(doc)
    local tc = doc.tool_choice
    if not absent(tc) and not CHOICES[tc] and not (is_object(tc) and type(tc.type) == "string") then
        return "tool_choice", "tool_choice must be none, auto, required or an object"
    end
    local text = doc.text
    if absent(text) then
        return nil
    end
    if not is_object(text) then
        return "text", "text must be an object"
    end
    local f = text.format
    if absent(f) then
        return nil
    end
    if not is_object(f) or not FORMATS[f.type] then
        return "text.format.type", "text.format.type must be text, json_object or json_schema"
    end
    if f.type == "json_schema" then
        if type(f.name) ~= "string" then
            return "text.format.name", "a json_schema format needs a string name"
        end
        if not is_object(f.schema) then
            return "text.format.schema", "a json_schema format needs a schema object"
        end
    end
    return nil
end

-- nil when body `doc` is fine for a model whose output limit is `limit`, else the
-- bad param's name and a message.
function _M.check(doc, limit)
    local p, msg = input(doc.input, not absent(doc.previous_response_id))
    if p then return p, msg end
    p, msg = tools(doc.tools)
    if p then return p, msg end
    p, msg = scalars(doc, limit)
    if p then return p, msg end
    p, msg = metadata(doc.metadata)
    if p then return p, msg end
    return choice_and_text(doc)
end

return _M
