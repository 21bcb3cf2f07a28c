-- The protocol adapters (lua/sluice/adapters/): caller bodies into the internal
-- request (decode) and back (respond), internal requests into backend bodies
-- (request) and backend answers into the internal response (response), for a few
-- representative bodies of each protocol. Streams: test_adapters_stream.lua.
local cjson = require("cjson.safe")
local openai = require("sluice.adapters.openai")
local predict = require("sluice.adapters.predict")
local tfserving = require("sluice.adapters.tfserving")
local infer = require("sluice.adapters.infer")
local unified = require("sluice.adapters.unified")
local kserve_v2 = require("sluice.adapters.kserve_v2")
local vendor = require("sluice.adapters.vendor")
local mappings = require("sluice.mappings")

local T = {}

local function json(s)
    return assert(cjson.decode(s))
end

-- `got` encodes to the same JSON as `want` (cjson sorts no keys: compare decoded)
local function same(got, want, what)
    local function eq(a, b)
        if type(a) ~= "table" or type(b) ~= "table" then return a == b end
        for k, v in pairs(a) do if not eq(v, b[k]) then return false end end
        for k in pairs(b) do if a[k] == nil then return false end end
        return true
    end
    assert(eq(got, want), (what or "") .. ": got " .. tostring(cjson.encode(got)) .. ", want "
                          .. tostring(cjson.encode(want)))
end

local CHAT, COMPLETION, EMBEDDING = { kind = "chat" }, { kind = "completion" }, { kind = "embedding" }
local PREDICT = { kind = "predict" }

-- ---- OpenAI ---------------------------------------------------------------------

function T.openai_chat_decodes_to_the_last_user_text()
    local doc = json([=[{"model": "chat-a", "temperature": 0.2, "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "First question"},
                     {"role": "assistant", "content": "An answer"},
                     {"role": "user", "content": [{"type": "text", "text": "Second question"}]}]}]=])
    local ireq = assert(openai.decode(CHAT, doc, "chat-a"))
    assert(ireq.kind == "chat" and ireq.model == "chat-a")
    same(ireq.inputs, { "Second question" }, "inputs")
    assert(ireq.stream == true and ireq.include_usage == true)
    assert(ireq.params.temperature == 0.2 and #ireq.messages == 4)
end

function T.openai_bad_bodies_say_what_is_wrong()
    local _, err = openai.decode(CHAT, json([=[{"model": "m"}]=]), "m")
    assert(err == 'field "messages" must be a non-empty list', err)
    _, err = openai.decode(CHAT, json([=[{"messages": [{"content": "no role"}]}]=]), "m")
    assert(err == 'every message needs a string "role"', err)
    _, err = openai.decode(CHAT, json([=[{"messages": [{"role": "system", "content": "x"}]}]=]), "m")
    assert(err == "the conversation needs a user message with text content", err)
    _, err = openai.decode(COMPLETION, json([=[{"prompt": [1, 2]}]=]), "m")
    assert(err == 'field "prompt" must be a string or a list of strings', err)
end

function T.openai_completion_and_embedding_inputs()
    local ireq = assert(openai.decode(COMPLETION, json([=[{"prompt": "Once upon"}]=]), "m"))
    same(ireq.inputs, { "Once upon" })
    assert(ireq.stream == false and ireq.include_usage == false)
    ireq = assert(openai.decode(EMBEDDING, json([=[{"input": ["a", "b c"]}]=]), "e"))
    same(ireq.inputs, { "a", "b c" })
end

function T.openai_respond_builds_a_chat_completion_with_usage()
    local ireq = assert(openai.decode(CHAT, json([=[{"messages":
        [{"role": "user", "content": "Hello there friend"}]}]=]), "chat-a"))
    local body = openai.respond(ireq, { outputs = { "Hi!" } })
    assert(body.object == "chat.completion" and body.model == "chat-a")
    assert(body.id:find("^chatcmpl%-"), body.id)
    same(body.choices, { { index = 0, finish_reason = "stop",
                           message = { role = "assistant", content = "Hi!" } } })
    -- no usage from the backend: estimated by words
    same(body.usage, { prompt_tokens = 3, completion_tokens = 1, total_tokens = 4 })
    -- the backend's own usage wins
    local u = { prompt_tokens = 9, completion_tokens = 2, total_tokens = 11 }
    assert(openai.respond(ireq, { outputs = { "Hi!" }, usage = u }).usage == u)
end

function T.openai_respond_completion_has_one_choice_per_output()
    local ireq = assert(openai.decode(COMPLETION, json([=[{"prompt": ["a", "b"]}]=]), "m"))
    local body = openai.respond(ireq, { outputs = { "x", { y = 1 } } })
    assert(body.object == "text_completion" and body.id:find("^cmpl%-"))
    assert(body.choices[1].text == "x" and body.choices[2].text == '{"y":1}')
    assert(body.choices[2].index == 1)
end

function T.openai_backend_request_and_answer()
    local ireq = { kind = "predict", inputs = { "Summarise this." },
                   params = { temperature = 0.5, max_length = 20, threshold = 0.3 } }
    local path, body = openai.request(ireq, nil, "chat-b")
    assert(path == "/v1/chat/completions")
    same(body, { model = "chat-b", temperature = 0.5, max_tokens = 20,
                 messages = { { role = "user", content = "Summarise this." } } })
    local _, err = openai.request({ inputs = { "a", "b" }, params = {} }, nil, "chat-b")
    assert(err == "model chat-b is a chat model: send exactly one text input", err)

    local ires = assert(openai.response(json([=[{"choices": [{"index": 0,
        "message": {"role": "assistant", "content": "Short."}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}]=])))
    same(ires.outputs, { "Short." })
    assert(ires.usage.total_tokens == 4)
    local _, rerr = openai.response(json([=[{"object": "list"}]=]))
    assert(rerr == "answer has no choices", rerr)
    assert(openai.error_message(json([=[{"error": {"message": "rate limited"}}]=])) == "rate limited")
    assert(openai.error_message(json([=[{"error": "plain"}]=])) == "plain")
end

-- ---- KServe v1 predict and TensorFlow Serving --------------------------------------

function T.predict_caller_and_backend()
    local ireq = assert(predict.decode(PREDICT, json([=[{"instances": [[1, 2], [3, 4]],
        "parameters": {"threshold": 0.5}}]=]), "cv"))
    same(ireq.inputs, { { 1, 2 }, { 3, 4 } })
    assert(ireq.params.threshold == 0.5)
    -- a single "input" is a list of one
    same(assert(predict.decode(PREDICT, json([=[{"input": "text"}]=]), "cv")).inputs, { "text" })
    local _, err = predict.decode(PREDICT, json([=[{"data": []}]=]), "cv")
    assert(err == 'body needs "instances" (a list)', err)

    local path, body = predict.request(ireq, nil, "my model")
    assert(path == "/v1/models/my%20model/predict", path)
    same(body, { instances = { { 1, 2 }, { 3, 4 } } })
    same(predict.respond(ireq, { outputs = { 0, 1 } }), { model = "cv", predictions = { 0, 1 } })

    same(assert(predict.response(json([=[{"predictions": [{"label": "cat"}]}]=]))).outputs,
         { { label = "cat" } })
    local _, rerr = predict.response(json([=[{"outputs": []}]=]))
    assert(rerr == 'answer has no "predictions" list', rerr)
    assert(predict.error_message(json([=[{"error": {"message": "no such model"}}]=]))
           == "no such model")
end

function T.tfserving_backend_path()
    local path, body = tfserving.request({ inputs = { { 1.5 } } }, nil, "resnet")
    assert(path == "/v1/models/resnet:predict", path)
    same(body, { instances = { { 1.5 } } })
    assert(tfserving.error_message(json([=[{"error": "Servable not found"}]=]))
           == "Servable not found")
end

-- ---- /api/v1/model/{id}/infer and /v1/predict (unified) ----------------------------

function T.infer_answers_in_the_shape_it_was_asked()
    local one = assert(infer.decode(PREDICT, json([=[{"input": "hi", "params": {"max_length": 5}}]=]),
                                    "m"))
    same(one.inputs, { "hi" })
    same(infer.respond(one, { outputs = { "out" } }), { model = "m", output = "out" })
    local many = assert(infer.decode(PREDICT, json([=[{"input": ["a", "b"]}]=]), "m"))
    same(infer.respond(many, { outputs = { "x", "y" } }).output, { "x", "y" })
    local _, err = infer.decode(PREDICT, json([=[{"params": {}}]=]), "m")
    assert(err == 'field "input" is required', err)
    _, err = infer.decode(PREDICT, json([=[{"input": "x", "params": 3}]=]), "m")
    assert(err == 'field "params" must be an object', err)
end

function T.unified_envelope_round_trip()
    local ireq = assert(unified.decode(PREDICT, json([=[{"api_version": "1.0",
        "model_type": "cv/ocr", "model": "ocr", "request_id": "r-1",
        "params": {"input": ["img1", "img2"], "threshold": 0.5}}]=]), "ocr"))
    same(ireq.inputs, { "img1", "img2" })
    same(ireq.params, { threshold = 0.5 })
    same(unified.respond(ireq, { outputs = { "A", "B" } }),
         { api_version = "1.0", request_id = "r-1", model = "ocr", model_type = "cv/ocr",
           outputs = { "A", "B" } })
    local _, err = unified.decode(PREDICT, json([=[{"api_version": "2.0", "params": {"input": 1}}]=]),
                                  "m")
    assert(err == 'field "api_version" must be "1.0"', err)
    _, err = unified.decode(PREDICT, json([=[{"api_version": "1.0", "params": {}}]=]), "m")
    assert(err == 'field "params" must be an object with "input"', err)
end

-- ---- KServe v2 ------------------------------------------------------------------

function T.kserve_v2_tensors_in()
    local ireq = assert(kserve_v2.decode(PREDICT, json([=[{"id": "q1", "inputs": [{"name": "x",
        "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}]}]=]), "tab"))
    same(ireq.inputs, { { 1, 2 }, { 3, 4 } })
    assert(ireq.meta.id == "q1")
    -- nested data is flattened first
    ireq = assert(kserve_v2.decode(PREDICT, json([=[{"inputs": [{"name": "x", "shape": [2, 2],
        "datatype": "FP32", "data": [[1, 2], [3, 4]]}]}]=]), "tab"))
    same(ireq.inputs, { { 1, 2 }, { 3, 4 } })
    local _, err = kserve_v2.decode(PREDICT, json([=[{"inputs": [{"name": "x", "shape": [3],
        "datatype": "FP32", "data": [1, 2]}]}]=]), "tab")
    assert(err == "inputs[0]: a tensor's data does not fit its shape", err)
end

function T.kserve_v2_backend_requests()
    local path, body = kserve_v2.request({ kind = "predict", inputs = { { 1, 2 }, { 3, 4 } },
                                           params = {} }, nil, "tab")
    assert(path == "/v2/models/tab/infer", path)
    same(body, { inputs = { { name = "input", shape = { 2, 2 }, datatype = "FP64",
                              data = { 1, 2, 3, 4 } } } })
    path, body = kserve_v2.request({ kind = "predict", inputs = { "a", "b" }, params = {} }, nil, "t")
    assert(path == "/v2/models/t/infer" and body.inputs[1].datatype == "BYTES")
    local _, err = kserve_v2.request({ kind = "predict", inputs = { "a", 1 }, params = {} }, nil, "t")
    assert(err == "model t (KServe v2): inputs mix text and other values", err)
    -- text kinds use Triton's generate extension
    path, body = kserve_v2.request({ kind = "chat", inputs = { "Hi" }, stream = true,
                                     params = { temperature = 0.1 } }, nil, "llm")
    assert(path == "/v2/models/llm/generate_stream", path)
    same(body, { text_input = "Hi", parameters = { temperature = 0.1 } })
end

function T.kserve_v2_answers_out()
    local ireq = { kind = "predict", model = "tab", inputs = { 1, 2 }, meta = { id = "q" } }
    local ires = assert(kserve_v2.response(json([=[{"outputs": [{"name": "output", "shape": [2],
        "datatype": "FP32", "data": [0.1, 0.9]}]}]=]), ireq))
    same(ires.outputs, { 0.1, 0.9 })
    -- several output tensors: one object per row
    ires = assert(kserve_v2.response(json([=[{"outputs": [
        {"name": "label", "shape": [2], "datatype": "BYTES", "data": ["cat", "dog"]},
        {"name": "score", "shape": [2], "datatype": "FP32", "data": [0.8, 0.2]}]}]=]), ireq))
    same(ires.outputs, { { label = "cat", score = 0.8 }, { label = "dog", score = 0.2 } })
    -- and back to a caller: one tensor per field, in name order
    local body = kserve_v2.respond(ireq, ires)
    assert(body.model_name == "tab" and body.id == "q")
    same(body.outputs, { { name = "label", shape = { 2 }, datatype = "BYTES", data = { "cat", "dog" } },
                         { name = "score", shape = { 2 }, datatype = "FP64", data = { 0.8, 0.2 } } })
    local _, err = kserve_v2.response(json([=[{"text_output": "x"}]=]), ireq)
    assert(err == 'answer has no "outputs" list', err)
    same(assert(kserve_v2.response(json([=[{"text_output": "Hello"}]=]), { kind = "chat" })).outputs,
         { "Hello" })
end

-- ---- vendor mappings ------------------------------------------------------------

local function vendor_pool(m)
    local compiled = mappings.compile({ v = m })
    return { mapping = compiled.v }
end

function T.vendor_mapping_fills_the_template()
    local pool = vendor_pool(json([=[{"path": "/generate",
        "request": {"text": "{{input}}", "model": "{{model}}",
                    "opts": {"lang": "cn", "t": "{{params.temperature}}"}},
        "response": {"output": "/result/text", "error": "/err/msg"}}]=]))
    local path, body = vendor.request({ kind = "predict", inputs = { "hello" },
                                        params = { temperature = 0.7 } }, pool, "v-model")
    assert(path == "/generate")
    same(body, { text = "hello", model = "v-model", opts = { lang = "cn", t = 0.7 } })
    -- a parameter the caller did not send is left out, not sent empty
    path, body = vendor.request({ kind = "predict", inputs = { "hi" }, params = {} }, pool, "v")
    assert(path == "/generate")
    same(body.opts, { lang = "cn" })
    local _, err = vendor.request({ kind = "predict", inputs = { "a", "b" }, params = {} }, pool, "v")
    assert(err == "model v takes one input per request", err)
    _, err = vendor.request({ kind = "embedding", inputs = { "a" }, params = {} }, pool, "v")
    assert(err == "model v cannot compute embeddings", err)

    same(assert(vendor.response(json([=[{"result": {"text": "ni hao"}}]=]), nil, pool)).outputs,
         { "ni hao" })
    local _, rerr = vendor.response(json([=[{"result": {}}]=]), nil, pool)
    assert(rerr == "answer has nothing at /result/text", rerr)
    assert(vendor.error_message(json([=[{"err": {"msg": "quota"}}]=]), pool) == "quota")
end

function T.vendor_batch_mapping()
    local pool = vendor_pool(json([=[{"path": "/batch", "request": {"texts": "{{inputs}}"},
        "response": {"output": "/results"}}]=]))
    assert(pool.mapping.batch == true)
    local _, body = vendor.request({ kind = "predict", inputs = { "a", "b" }, params = {} }, pool, "v")
    same(body, { texts = { "a", "b" } })
    same(assert(vendor.response(json([=[{"results": ["A", "B"]}]=]), nil, pool)).outputs, { "A", "B" })
    local _, err = vendor.response(json([=[{"results": "A"}]=]), nil, pool)
    assert(err == "answer at /results is not a list", err)
end

return T
