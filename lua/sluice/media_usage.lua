-- What audio and image work bills by (issue 25): seconds of audio transcribed or
-- translated (the backend's answer when the gateway reads it: a vendor's, the
-- envelope's; else the uploaded WAV's header), characters of text spoken, images
-- made. Noted in access (ctx.usage.media), counted by sluice.usage in the log phase for
-- an answer that succeeded, written on the log line (sluice.accesslog).
local tokens = require("sluice.tokens")

local type = type
local tonumber = tonumber
local floor = math.floor
local str_gsub = string.gsub

local _M = {}

-- UTF-8 characters in `s` (bytes that do not continue a character).
local function chars(s)
    local _, continuation = str_gsub(s, "[\128-\191]", "")
    return #s - continuation
end

-- Access step (sets ctx.usage.media): what this request will bill, as far as known.
-- `doc`: the decoded JSON body (nil for an upload).
function _M.note(ctx, endpoint, doc)
    local task = endpoint.task
    if not task then
        return
    end
    local form = ctx.body.form
    local bill = { audio = 0, chars = 0, images = 0 }
    if task == "speech" then
        local input = doc and doc.input
        bill.chars = type(input) == "string" and chars(input) or 0
    elseif task == "image" then
        local n = tonumber(doc and doc.n or form and form.fields.n) or 1
        bill.images = n >= 1 and n <= 128 and floor(n) or 1
    else
        bill.audio = form and form.seconds or 0
    end
    tokens.of(ctx).media = bill
end

-- Log phase: the bill of a request whose answer succeeded (`status` < 400), or nil:
-- audio seconds, characters, images. The answer's seconds win over the header's.
function _M.bill(ctx, status)
    local u = ctx.usage
    local bill = u and u.media
    local conv = ctx.conv
    local heard = conv and conv.audio_seconds
    if heard and not bill then   -- brief 000's envelope to an ASR model
        bill = { audio = heard, chars = 0, images = 0 }
        tokens.of(ctx).media = bill
    elseif heard then
        bill.audio = heard
    end
    if not bill or status >= 400 then
        return nil
    end
    return bill.audio, bill.chars, bill.images
end

return _M
