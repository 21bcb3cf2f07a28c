-- What a pair of caller API and backend protocol can carry, checked before limits
-- count the request (sluice.steps) and again when the body is converted (the
-- fallback's model may differ): a feature the pair cannot carry is a 400 naming the
-- parameter, never a silent drop.
--
--   tools                 only to backends that take tools (openai, openai_responses,
--                         anthropic, gemini); a predict, KServe, TF Serving or vendor backend
--                         cannot call them
--   previous_response_id  (and conversation, background, prompt) on /v1/responses:
--                         only to a backend that speaks Responses natively
--   generation params     what the backend's adapter refuses of the chat form's params
--                         (n above 1 to anthropic and gemini; stop, top_k, seed, … to
--                         openai_responses; …): the adapter's own `refuses`, on the
--                         caller's params in chat's names, the 400 naming the caller's
--                         own field (stop_sequences, text.format)
local responses = require("sluice.adapters.responses")
local anthropic = require("sluice.adapters.anthropic")
local ac = require("sluice.adapters.anthropic_convert")
local responses_backend = require("sluice.adapters.responses_backend")
local gemini = require("sluice.adapters.gemini")

local type = type

local TOOLS = { openai = true, openai_responses = true, anthropic = true, gemini = true }
-- backend protocol -> its adapter's check of the chat form's params
local REFUSES = { openai_responses = responses_backend.refuses, anthropic = anthropic.refuses,
                  gemini = gemini.refuses }

local _M = {}

-- The pool a request at `endpoint` for compiled model `model` goes to (as
-- sluice.target picks it).
function _M.pool_for(endpoint, model)
    local pool = endpoint.native and model.pools[endpoint.native]
    if not pool then
        local first = model.pool_order[1]
        pool = first and model.pools[first]
    end
    return pool
end

-- nil, or the param the pair of `endpoint` and backend `protocol` cannot carry in
-- body `doc`, and why.
function _M.check(endpoint, doc, protocol, model_name)
    if type(doc) ~= "table" or endpoint.native == protocol then
        return nil
    end
    local tools = doc.tools
    if type(tools) == "table" and tools[1] ~= nil and not TOOLS[protocol] then
        return "tools", "model " .. model_name .. " cannot call tools (its backends speak "
                        .. protocol .. ")"
    end
    local refuses = REFUSES[protocol]
    if endpoint.api == "responses" then
        local param, why = responses.unsupported(doc)
        if param or not refuses then
            return param, why
        end
        return responses.own_param(refuses(responses.params_of(doc)))
    end
    if not refuses or endpoint.answered then
        return nil
    end
    if endpoint.caller == "anthropic" then
        local param, why = refuses(ac.params_of(doc))
        if param then
            return anthropic.own_param(param, why)
        end
    elseif endpoint.caller == "openai" and (endpoint.kind == "chat"
                                            or endpoint.kind == "completion") then
        return refuses(doc)   -- the chat form's params are the body's own fields
    end
    return nil
end

-- Access step: the same for the pool `model` would use.
function _M.check_model(endpoint, doc, model)
    local pool = model and _M.pool_for(endpoint, model)
    if not pool then
        return nil
    end
    return _M.check(endpoint, doc, pool.protocol, model.name)
end

return _M
