-- PII masking for what Sluice writes down: e-mail addresses, phone numbers, national
-- ID numbers and bank card numbers become fixed placeholders. Used for the optional
-- request excerpt in the access log (GatewayConfig.log_excerpts characters; 0 = off).
--
-- Patterns are deliberately broad (a false mask costs nothing in a log line; a
-- missed one leaks): the order matters, longer and more specific shapes first.
local cjson = require("cjson.safe")

local ngx = ngx
local re_gsub = ngx.re.gsub
local re_match = ngx.re.match
local ngx_req = ngx.req
local str_find = string.find
local str_sub = string.sub

-- a JSON string literal, escapes included; possessive, so long strings never backtrack
local JSON_STRING = [["(?:[^"\\]++|\\.)*+"]]

local _M = {}

local RULES = {
    -- e-mail
    { [[[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}]], "<email>" },
    -- national IDs: PRC resident ID (17 digits + digit or X), US SSN
    { [[(?<![0-9])[1-9][0-9]{16}[0-9Xx](?![0-9])]], "<national_id>" },
    { [[(?<![0-9])[0-9]{3}-[0-9]{2}-[0-9]{4}(?![0-9])]], "<national_id>" },
    -- bank cards: 13 to 19 digits, optionally grouped by spaces or dashes
    { [[(?<![0-9])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])]], "<card>" },
    -- phones: international (+CC ...), PRC mobile, and (NNN) NNN-NNNN styles
    { [[\+[0-9]{1,3}[ .-]?(?:\(?[0-9]{1,4}\)?[ .-]?){2,5}[0-9]{2,4}]], "<phone>" },
    { [[(?<![0-9])1[3-9][0-9]{9}(?![0-9])]], "<phone>" },
    { [[\(?(?<![0-9])[0-9]{3}\)?[ .-][0-9]{3}[ .-][0-9]{4}(?![0-9])]], "<phone>" },
}

local excerpt_chars = 0

-- Called once from init_by_lua with the gateway's setting.
function _M.configure(chars)
    excerpt_chars = tonumber(chars) or 0
end

-- `s` with every PII match replaced by its placeholder.
function _M.mask(s)
    for i = 1, #RULES do
        local rule = RULES[i]
        local out, _, err = re_gsub(s, rule[1], rule[2], "jo")
        if out then
            s = out
        elseif err then
            ngx.log(ngx.ERR, "pii rule ", i, " failed: ", err)
            return "<unmaskable>"
        end
    end
    return s
end

-- Access phase: keep the masked start of a (valid UTF-8) body for the log line.
function _M.excerpt(ctx, body)
    if excerpt_chars <= 0 then
        return
    end
    local m = re_match(body, "^.{0," .. excerpt_chars .. "}", "sjou")
    if m then
        ctx.body.excerpt = _M.mask(m[0])
    end
end

local function mask_literal(m)
    local lit = m[0]
    if str_find(lit, "[%d@]") then   -- every rule needs a digit or an "@"
        return '"' .. _M.mask(str_sub(lit, 2, -2)) .. '"'
    end
    return lit
end

-- Access phase, before conversion: for a model with `mask_pii`, mask the string
-- values (and keys) of the JSON body that goes to the backend. Numbers and the
-- document's shape are left as they are: only string literals are rewritten, and no
-- placeholder needs escaping. Returns the document to convert from (re-decoded when
-- something was masked; nil stays nil for a body no step decodes, which a model with
-- mask_pii never has: sluice.body), or nil and an error when masking failed (nothing
-- may be forwarded then).
function _M.forward(model, doc)
    if not model.mask_pii then
        return doc
    end
    local raw = ngx_req.get_body_data()
    if not raw then
        return doc
    end
    local masked, _, err = re_gsub(raw, JSON_STRING, mask_literal, "jo")
    if not masked then
        ngx.log(ngx.ERR, "pii masking of the request failed: ", err)
        return nil, "pii masking of the request failed"
    end
    if masked == raw then
        return doc
    end
    ngx_req.set_body_data(masked)
    return cjson.decode(masked) or doc
end

return _M
