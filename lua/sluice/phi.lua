-- Personal and health data, both directions (docs/phi.md): a model's (or its
-- consumer's) `phi_policy` names per class what happens to a hit: "mask" (a typed
-- placeholder, [PHONE_1], the same value the same way within a request), "block"
-- (451 naming the class) or "log" (counted only). Counted by class in
-- sluice_phi_detections_total and the log line's `phi`, never the values.
--
-- The request is scanned in access, before conversion (steps); the answer, when it
-- is not a stream, in the relay (phases.send_relayed: relay.wanted() sends such a
-- request through it), before it reaches the caller; an OpenAI chat stream in the
-- body filter, across frames (sluice.phi_stream).
--
-- Writes ctx.body.phi (this module only): { policy, counts = {class -> n}, seen, next,
-- summary } made on the request's first scan. A request whose model and consumer
-- have no policy costs two field reads (policy_of) and nothing else.
local cjson = require("cjson.safe")
local metrics = require("sluice.metrics")
local scan = require("sluice.phi_scan")
local phi_stream = require("sluice.phi_stream")

local ngx = ngx
local ngx_req = ngx.req
local ngx_log = ngx.log
local ERR = ngx.ERR
local re_gsub = ngx.re.gsub
local str_find = string.find
local str_sub = string.sub
local concat = table.concat
local pairs = pairs
local type = type

-- a JSON string literal, escapes included; possessive, so long strings never backtrack
local JSON_STRING = [["(?:[^"\\]++|\\.)*+"]]
local SHORTEST = 5 + 2   -- a literal this short holds no value of any class (quotes in)

local _M = {}

metrics.register("sluice_phi_detections_total", "counter",
                 "Personal or health data found, by class, direction (request, answer) "
                 .. "and the action its model's phi_policy takes (never the values).",
                 { "model", "class", "direction", "action" })

_M.validate = scan.validate
_M.compile = scan.compile

-- The compiled policy that applies to this request: its consumer's, else its model's.
local function policy_of(ctx, model)
    local consumer = ctx.caller.consumer
    return consumer and consumer.phi or model.phi
end

-- the request's state, made on its first scan (writes ctx.body.phi)
local function state_of(ctx, policy)
    local b = ctx.body   -- none on a location without the request's context (probes)
    local st = b and b.phi
    if not st then
        st = { policy = policy, counts = {}, seen = {}, next = {} }
        ctx.body.phi = st
    end
    return st
end

local function action_of(policy, name)
    for i = 1, #policy do
        if policy[i].class.name == name then
            return policy[i].action
        end
    end
end

-- Count what this scan found (metrics) and refresh the log line's summary.
local function tally(ctx, st, before, direction)
    local model = ctx.target.model_name or ""
    local parts, n = {}, 0
    for name, count in pairs(st.counts) do
        local new = count - (before[name] or 0)
        if new > 0 then
            metrics.inc("sluice_phi_detections_total", new, model, name, direction,
                        action_of(st.policy, name))
        end
        n = n + 1
        parts[n] = name .. ":" .. count
    end
    table.sort(parts)
    st.summary = concat(parts, ",")
end

local function copy(t)
    local c = {}
    for k, v in pairs(t) do c[k] = v end
    return c
end

-- Scan every string literal of JSON text `raw` (keys too; numbers are not text).
-- Returns the text (masked where a class masks), the first blocked class; or nil,
-- nil, err.
local function scan_json(raw, st)
    local blocked, failed
    local function literal(m)
        local lit = m[0]
        if #lit < SHORTEST or blocked or failed then
            return lit
        end
        local escaped = str_find(lit, "\\", 2, true)
        local text = escaped and cjson.decode(lit) or str_sub(lit, 2, -2)
        if type(text) ~= "string" then
            return lit
        end
        local out, b, err = scan.scan(text, st.policy, st)
        if not out then
            failed = err
            return lit
        end
        blocked = b
        if out == text then
            return lit
        end
        -- a placeholder needs no escaping; decoded text is encoded again
        return escaped and cjson.encode(out) or '"' .. out .. '"'
    end
    local out, _, err = re_gsub(raw, JSON_STRING, literal, "jo")
    if failed or not out then
        return nil, nil, failed or err
    end
    return out, blocked
end

_M.scan_json = scan_json   -- tests and bench/phi.py

local function refusal(blocked, direction)
    return 451, "policy_violation", "the " .. direction .. " holds personal data of class "
           .. blocked .. ", which phi_policy blocks"
end

-- Access phase, before conversion (steps): scan the request body for a model (or
-- consumer) with a phi_policy. Returns the document to convert from (re-decoded
-- when something was masked), or nil, status, type, message.
function _M.request(ctx, model, doc)
    local policy = policy_of(ctx, model)
    if not policy or ctx.body.form then   -- an upload (multipart) is not scanned
        return doc
    end
    ngx_req.read_body()
    local raw = ngx_req.get_body_data()
    if not raw then
        return doc   -- no body, or a multipart upload's on disk: not scanned
    end
    local st = state_of(ctx, policy)
    st.streaming = type(doc) == "table" and doc.stream == true   -- its answer: body_filter()
    local before = copy(st.counts)
    local out, blocked, err = scan_json(raw, st)
    if not out then
        ngx_log(ERR, "phi scan of the request failed: ", err)
        return nil, 500, "internal_error", "the request could not be scanned for personal data"
    end
    tally(ctx, st, before, "request")
    if blocked then
        return nil, refusal(blocked, "request")
    end
    if out == raw then
        return doc
    end
    ngx_req.set_body_data(out)
    return cjson.decode(out) or doc
end

-- Header filter: a streamed answer under a phi_policy changes length (masked, held).
function _M.header_filter(ctx)
    local b = ctx.body   -- none on a location without the request's context (probes)
    local st = b and b.phi
    if st and st.streaming then
        ngx.header["Content-Length"] = nil
    end
end

-- Body filter: a streamed answer under a phi_policy, scanned across frames
-- (sluice.phi_stream); nothing for any other answer.
function _M.body_filter(ctx)
    local b = ctx.body   -- none on a location without the request's context (probes)
    local st = b and b.phi
    if not st or not st.streaming then
        return
    end
    if not st.answer_before then
        st.answer_before = copy(st.counts)
    end
    if phi_stream.filter(ctx, st) then
        tally(ctx, st, st.answer_before, "answer")
    end
end

-- Access phase, the relayed answer `body` (not a stream) before it is sent
-- (phases.send_relayed): returns the body to send, or nil, status, type, message.
function _M.answer(ctx, body)
    local b = ctx.body   -- none on a location without the request's context (probes)
    local st = b and b.phi
    if not st or type(body) ~= "string" or body == "" then
        return body
    end
    local before = copy(st.counts)
    local out, blocked, err
    if str_find(body, "^%s*[%[{]") then
        out, blocked, err = scan_json(body, st)
    else
        out, blocked, err = scan.scan(body, st.policy, st)
    end
    if not out then
        ngx_log(ERR, "phi scan of the answer failed: ", err)
        return nil, 502, "backend_error", "the answer could not be scanned for personal data"
    end
    tally(ctx, st, before, "answer")
    if blocked then
        return nil, refusal(blocked, "answer")
    end
    return out
end

return _M
