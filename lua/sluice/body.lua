-- The request body before any step reads it: the cheap checks every inference body
-- passes (sluice.target runs them on the raw bytes), and whether a request needs its
-- body decoded at all (issue 13: a body is decoded only when a step needs it).
--
-- A request whose path names the model (/v1/models/{m}/predict, /v2/models/{m}/infer)
-- and whose model's backends speak the caller's protocol is forwarded as it came; the
-- steps that read the decoded body, and when they run:
--
--   model name         endpoints whose model is in the body: always
--   strict requests    the endpoints strict.lua checks (strict.checks)
--   conversion         an endpoint no backend protocol takes unchanged (infer,
--                      unified), or a model without a pool of the caller's protocol
--   content policy     policies for every model, or for the model or route asked for
--   response cache     a model with cache_ttl > 0 (the key is the canonical JSON)
--   PII masking        a model with mask_pii (it re-decodes what it masked)
--   token reservation  OpenAI endpoints only (their model is in the body)
--
-- For a route, any of its versions counts. Route conditions test the consumer's
-- attributes, never the body; a fallback decodes its saved body itself.
--
-- A body that is not decoded still passes the checks of shape_error() (and the UTF-8
-- check in target.lua): valid UTF-8, first non-space character "{", last "}". Other
-- malformed JSON reaches the backend, whose 400 the caller gets in the error template.
--
-- Pure Lua: tests/lua/test_body.lua runs it under plain luajit.
local strict = require("sluice.strict")
local versions = require("sluice.versions")

local str_byte = string.byte

local OPEN_BRACE = 123    -- "{"
local CLOSE_BRACE = 125   -- "}"
-- JSON's whitespace: space, tab, line feed, carriage return
local JSON_SPACE = { [32] = true, [9] = true, [10] = true, [13] = true }

local _M = {}

-- nil when `body` is shaped like a JSON object, else why not (for a 400).
function _M.shape_error(body)
    -- byte by byte, not str_find with a pattern: LuaJIT compiles this, not that
    local j = 1
    while JSON_SPACE[str_byte(body, j)] do
        j = j + 1
    end
    if str_byte(body, j) ~= OPEN_BRACE then
        return "request body must be a JSON object"
    end
    local i = #body
    while JSON_SPACE[str_byte(body, i)] do
        i = i - 1
    end
    if str_byte(body, i) ~= CLOSE_BRACE then
        return 'request body is not valid JSON: it does not end with "}"'
    end
    return nil
end

-- Must the body be decoded for the compiled model `m` at `endpoint`? (An unknown
-- name: yes, its malformed body is refused before the 404.)
local function model_needs(m, endpoint)
    return m == nil or m.cache_ttl > 0 or m.mask_pii or m.phi or not m.pools[endpoint.native]
end

-- Must a request at path-named `endpoint` for model or route `name` of compiled
-- snapshot `snap` have its body decoded? An unknown name: true (its malformed body is
-- refused before the 404, as for every endpoint).
function _M.needs_doc(snap, endpoint, name)
    if not endpoint.native or strict.checks(endpoint.name) then
        return true
    end
    local cp = snap.content
    if cp.global[1] ~= nil or cp.models[name] ~= nil then
        return true
    end
    return versions.any(snap, name, model_needs, endpoint)
end

return _M
