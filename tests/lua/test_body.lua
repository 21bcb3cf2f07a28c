-- The request body before any step reads it (sluice/body.lua): the shape every body
-- passes, and which path-named requests are decoded, step by step.
local body = require("sluice.body")

local T = {}

local PREDICT = { name = "predict", native = "predict", model_in_path = true }
local V2 = { name = "v2_infer", native = "kserve_v2", model_in_path = true }
local INFER = { name = "infer", model_in_path = true }   -- no native protocol

-- A compiled model (config.lua's shape, what needs_doc reads).
local function model(over)
    local m = { cache_ttl = 0, mask_pii = false, pools = { predict = {}, kserve_v2 = {} } }
    for k, v in pairs(over or {}) do
        m[k] = v
    end
    return m
end

local function snap(models, routes, content)
    return { models = models, routes = routes or {},
             content = content or { global = {}, models = {} } }
end

function T.object_shapes_pass()
    for _, b in ipairs({ "{}", '{"a": 1}', ' \t\r\n{"a": [1, 2]} \n', '{"x": "}"}' }) do
        assert(body.shape_error(b) == nil, b)
    end
end

function T.other_shapes_are_refused()
    local start = "request body must be a JSON object"
    for _, b in ipairs({ "[1, 2]", '"m"', "1", "null", "x{}", "\f{}" }) do
        assert(body.shape_error(b) == start, b)
    end
    -- truncated or with trailing bytes: the commonest malformed bodies
    for _, b in ipairs({ '{"model": "m", ', "{", '{"a": 1} x', '{"a": [1, 2]' }) do
        local why = body.shape_error(b)
        assert(why and why:find("does not end with", 1, true), b)
    end
end

function T.same_protocol_passthrough_is_not_decoded()
    local s = snap({ m = model() })
    assert(body.needs_doc(s, PREDICT, "m") == false)
    assert(body.needs_doc(s, V2, "m") == false)
end

function T.each_step_that_reads_the_body_decodes_it()
    -- conversion: no pool of the caller's protocol
    assert(body.needs_doc(snap({ m = model({ pools = { openai = {} } }) }), V2, "m"))
    -- response cache, PII masking
    assert(body.needs_doc(snap({ m = model({ cache_ttl = 60 }) }), PREDICT, "m"))
    assert(body.needs_doc(snap({ m = model({ mask_pii = true }) }), PREDICT, "m"))
    -- content policy: global, or for this model only
    local policy = { name = "p", terms = { "x" } }
    assert(body.needs_doc(snap({ m = model() }, nil, { global = { policy }, models = {} }),
                          PREDICT, "m"))
    local other = snap({ m = model() }, nil, { global = {}, models = { m = { policy } } })
    assert(body.needs_doc(other, PREDICT, "m"))
    other.content.models = { n = { policy } }
    assert(body.needs_doc(other, PREDICT, "m") == false)
    -- strict checks and conversion: infer always
    assert(body.needs_doc(snap({ m = model() }), INFER, "m"))
    -- unknown model: decoded, so a malformed body is still a 400 before the 404
    assert(body.needs_doc(snap({}), PREDICT, "nope"))
end

function T.a_route_decodes_when_any_version_needs_it()
    local routes = { r = { cond = { { model = "a" } }, split = { { model = "b", upto = 10000 } } } }
    assert(body.needs_doc(snap({ a = model(), b = model() }, routes), PREDICT, "r") == false)
    assert(body.needs_doc(snap({ a = model({ cache_ttl = 5 }), b = model() }, routes),
                          PREDICT, "r"))
    assert(body.needs_doc(snap({ a = model(), b = model({ pools = { openai = {} } }) },
                               routes), PREDICT, "r"))
end

return T
