-- KServe / Triton Open Inference Protocol v2. Tensors are
-- {"name", "shape", "datatype", "data"} with `data` flat in row-major order.
--   predict kinds:  POST /v2/models/{m}/infer            {"inputs": [tensor]}
--   text kinds:     POST /v2/models/{m}/generate[_stream] {"text_input": ...}
--                   (Triton's generate extension; the stream is SSE with
--                   {"text_output": <delta>} events)
local cjson = require("cjson.safe")
local common = require("sluice.adapters.common")

local escape_uri = ngx.escape_uri
local type = type
local ipairs = ipairs
local pairs = pairs
local sort = table.sort
local floor = math.floor

local is_list = common.is_list

local _M = {}

-- Items -> one tensor, or nil, message.
local function tensor(name, items)
    local first = items[1]
    local n = #items
    if type(first) == "string" then
        for _, x in ipairs(items) do
            if type(x) ~= "string" then return nil, "inputs mix text and other values" end
        end
        return { name = name, shape = { n }, datatype = "BYTES", data = items }
    end
    if type(first) == "number" or type(first) == "boolean" then
        local dt = type(first) == "number" and "FP64" or "BOOL"
        for _, x in ipairs(items) do
            if type(x) ~= type(first) then return nil, "inputs mix value types" end
        end
        return { name = name, shape = { n }, datatype = dt, data = items }
    end
    if is_list(first) then
        local m = #first
        local data = {}
        for _, row in ipairs(items) do
            if not is_list(row) or #row ~= m then
                return nil, "list inputs must all have the same length"
            end
            for _, x in ipairs(row) do
                if type(x) ~= "number" then return nil, "list inputs must hold numbers" end
                data[#data + 1] = x
            end
        end
        return { name = name, shape = { n, m }, datatype = "FP64", data = data }
    end
    return nil, "inputs must be text, numbers or equal-length lists of numbers"
end

-- One tensor -> its rows (shape[1] items), or nil, message.
local function rows(t)
    if type(t) ~= "table" or not is_list(t.shape) or type(t.data) ~= "table" then
        return nil, "a tensor needs a shape and data"
    end
    local data = t.data
    if is_list(data[1]) then     -- data may come nested; flatten one level
        local flat = {}
        for _, row in ipairs(data) do
            for _, x in ipairs(row) do flat[#flat + 1] = x end
        end
        data = flat
    end
    local n, total = t.shape[1], 1
    for _, d in ipairs(t.shape) do
        if type(d) ~= "number" or d < 1 or d ~= floor(d) then
            return nil, "a tensor's dimensions must be integers >= 1"
        end
        total = total * d
    end
    if total ~= #data then
        return nil, "a tensor's data does not fit its shape"
    end
    if #t.shape == 1 then
        return data
    end
    local size = total / n
    local out = {}
    for i = 1, n do
        local row = {}
        for j = 1, size do row[j] = data[(i - 1) * size + j] end
        out[i] = row
    end
    return out
end

-- ---- caller side ----------------------------------------------------------------

function _M.decode(endpoint, doc, model)
    local inputs = doc.inputs
    if not is_list(inputs) then
        return nil, 'field "inputs" must be a non-empty list of tensors'
    end
    local items, err = rows(inputs[1])
    if not items or not is_list(items) then
        return nil, "inputs[0]: " .. (err or "tensor has no data")
    end
    return { kind = endpoint.kind, model = model, inputs = items,
             params = type(doc.parameters) == "table" and doc.parameters or {},
             meta = { id = doc.id } }
end

function _M.respond(ireq, ires)
    local outputs = ires.outputs
    local tensors
    if common.is_object(outputs[1]) then
        -- one tensor per field of the (object) predictions
        local names = {}
        for k in pairs(outputs[1]) do names[#names + 1] = k end
        sort(names)
        tensors = {}
        for _, name in ipairs(names) do
            local col = {}
            for i, o in ipairs(outputs) do col[i] = type(o) == "table" and o[name] or cjson.null end
            tensors[#tensors + 1] = tensor(name, col)
                                    or tensor(name, { cjson.encode(col) })
        end
    else
        tensors = { tensor("output", outputs) }
        if not tensors[1] then
            local texts = {}
            for i, o in ipairs(outputs) do texts[i] = common.text(o) end
            tensors[1] = tensor("output", texts)
        end
    end
    return { model_name = ireq.model, id = ireq.meta.id, outputs = tensors }
end

-- ---- backend side ---------------------------------------------------------------

function _M.request(ireq, _, model_name)
    local base = "/v2/models/" .. escape_uri(model_name)
    if ireq.kind == "chat" or ireq.kind == "completion" then
        if #ireq.inputs ~= 1 then
            return nil, "model " .. model_name .. " takes one prompt per request"
        end
        local params = common.llm_params(ireq.params, {})
        return base .. (ireq.stream and "/generate_stream" or "/generate"),
               { text_input = ireq.inputs[1], parameters = next(params) and params or nil }
    end
    local t, err = tensor("input", ireq.inputs)
    if not t then
        return nil, "model " .. model_name .. " (KServe v2): " .. err
    end
    local params = ireq.params
    return base .. "/infer", { inputs = { t },
                               parameters = next(params) ~= nil and params or nil }
end

-- Streams: this backend answers SSE frames that adapters/sse.lua converts.
function _M.streams(ireq)
    return ireq.stream and (ireq.kind == "chat" or ireq.kind == "completion")
end

-- One decoded stream frame -> its text delta, or nil, message.
function _M.frame(doc)
    if type(doc.text_output) == "string" then
        return doc.text_output
    end
    return nil, _M.error_message(doc) or "stream frame has no text_output"
end

function _M.response(doc, ireq)
    if ireq.kind == "chat" or ireq.kind == "completion" then
        if type(doc.text_output) ~= "string" then
            return nil, 'answer has no "text_output"'
        end
        return { outputs = { doc.text_output } }
    end
    local outs = doc.outputs
    if not is_list(outs) then
        return nil, 'answer has no "outputs" list'
    end
    if #outs == 1 then
        local r, err = rows(outs[1])
        if not r then return nil, err end
        return { outputs = r }
    end
    local merged = {}
    for _, t in ipairs(outs) do
        local r, err = rows(t)
        if not r then return nil, err end
        for i, v in ipairs(r) do
            merged[i] = merged[i] or {}
            merged[i][t.name or "output"] = v
        end
    end
    return { outputs = merged }
end

function _M.error_message(doc)
    return type(doc.error) == "string" and doc.error or nil
end

return _M
