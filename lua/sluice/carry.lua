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
local responses = require("sluice.adapters.responses")

local type = type

local TOOLS = { openai = true, openai_responses = true, anthropic = true, gemini = true }

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
    if endpoint.api == "responses" then
        return responses.unsupported(doc)
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
