-- Streamed answers of a request whose model or consumer has a phi_policy (sluice.phi):
-- OpenAI chat chunks (SSE `data: {...choices[0].delta.content...}`), scanned across
-- frame boundaries in the body filter. The content is held back by HOLD bytes: a value
-- up to HOLD bytes long that starts in what is sent ends inside what is held, so the
-- scan sees it whole and the cut moves before it. The last CONTEXT bytes sent are
-- scanned again with what follows (a keyword such as "MRN:" in one frame, its value
-- in the next), but only hits in the new text count. What is sent goes out as one
-- chunk in the shape of the latest one; role, finish and usage chunks pass after the
-- held content. A blocked class ends the stream with an error event (the status, 200,
-- is gone already) and nothing after it.
--
-- Other stream shapes (Anthropic events, Responses events, a converted stream that is
-- not OpenAI chat) pass unscanned: docs/phi.md says so. Writes ctx.body.phi.stream.
local cjson = require("cjson.safe")
local scan = require("sluice.phi_scan")

local ngx = ngx
local ngx_log = ngx.log
local ERR = ngx.ERR
local str_find = string.find
local str_sub = string.sub
local str_match = string.match
local str_byte = string.byte
local concat = table.concat
local type = type

local HOLD = 64      -- bytes of content held back
local CONTEXT = 32   -- bytes of sent content scanned again with the next

local _M = {}

local function block_event(ctx, blocked)
    local err = { error = { code = 451, type = "policy_violation",
                            message = "the answer holds personal data of class " .. blocked
                                      .. ", which phi_policy blocks",
                            request_id = ctx.request_id } }
    return "data: " .. cjson.encode(err) .. "\n\ndata: [DONE]\n\n"
end

-- The held content that can go now (all of it when `final`), as a chunk; "" when none.
local function emit(ctx, st, s, final)
    local context = s.sent
    local text = context .. s.pending
    local lo = #context + 1
    local hi = final and #text or #text - HOLD
    if hi < lo or not s.tmpl then
        return ""
    end
    local ok, _, err = scan.scan(text, st.policy, st, true)
    if not ok then
        ngx_log(ERR, "phi scan of a streamed answer failed: ", err)
        s.done = true
        return block_event(ctx, "unscannable")
    end
    if not final then
        hi = scan.cut(lo, hi)
        local b = str_byte(text, hi + 1)
        while hi >= lo and b and b >= 0x80 and b < 0xC0 do   -- not inside a UTF-8 character
            hi = hi - 1
            b = str_byte(text, hi + 1)
        end
        if hi < lo then
            return ""
        end
    end
    local part, blocked = scan.apply(text, lo, hi, st)
    if blocked then
        s.done = true
        return block_event(ctx, blocked)
    end
    s.sent = str_sub(text, (hi - CONTEXT + 1 > 1) and hi - CONTEXT + 1 or 1, hi)
    s.pending = str_sub(text, hi + 1)
    s.tmpl.choices[1].delta.content = part
    return "data: " .. cjson.encode(s.tmpl) .. "\n\n"
end

local function on_event(ctx, st, s, event)
    local json = str_match(event, "^data: ?(.-)\n\n$")
    local doc = json and json ~= "[DONE]" and cjson.decode(json)
    local choices = type(doc) == "table" and doc.choices
    local choice = type(choices) == "table" and choices[1]
    local delta = type(choice) == "table" and choice.delta
    local content = type(delta) == "table" and delta.content
    if type(content) ~= "string" or content == "" then
        local held = s.pending ~= "" and emit(ctx, st, s, true) or ""
        return s.done and held or held .. event
    end
    s.tmpl = doc
    s.pending = s.pending .. content
    return emit(ctx, st, s, false)
end

-- Body filter, a stream under a phi_policy: rewrites ngx.arg[1] (and ends the answer
-- early on a blocked class). Returns true at the stream's end (sluice.phi counts then).
function _M.filter(ctx, st)
    local s = st.stream
    if not s then
        s = { buf = "", pending = "", sent = "" }
        st.stream = s
    end
    if s.done then
        ngx.arg[1] = ""
        return false
    end
    local data = s.buf .. (ngx.arg[1] or "")
    local eof = ngx.arg[2]
    local out, n, pos = {}, 0, 1
    while true do
        local e = str_find(data, "\n\n", pos, true)
        if not e then
            break
        end
        n = n + 1
        out[n] = on_event(ctx, st, s, str_sub(data, pos, e + 1))
        pos = e + 2
        if s.done then
            break
        end
    end
    s.buf = str_sub(data, pos)
    if eof and not s.done then
        n = n + 1
        out[n] = (s.pending ~= "" and emit(ctx, st, s, true) or "") .. s.buf
    end
    ngx.arg[1] = concat(out, "", 1, n)
    if s.done then
        ngx.arg[2] = true
        return true
    end
    return eof
end

return _M
