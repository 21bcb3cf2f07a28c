-- A plan's daily caps on audio and image work (issue 25): `max_audio_seconds_per_day`,
-- `max_speech_chars_per_day`, `max_images_per_day`, per consumer and UTC day, in the
-- style of the request quotas: what a request will bill is reserved in access when
-- it is known (a WAV's seconds, the characters to speak, the images asked for; a
-- request past the cap is a 429 `rate_limited` with retry_after = the seconds to the
-- next UTC day) and reconciled in the log phase (the seconds the answer reported;
-- all of it given back when the answer failed).
--
-- The counters are "ma:", "mc:", "mi:" + consumer id + ":" + day, in this gateway's
-- sluice_limits dict (seeded from the fleet's usage after a restart: usage.push), or
-- in Redis in cluster mode (sluice.redis_caps), as the request quotas are.
local limits = require("sluice.limits")
local metrics = require("sluice.metrics")

local ngx = ngx
local ngx_time = ngx.time
local os_date = os.date
local type = type
local pairs = pairs
local floor = math.floor

-- bill field -> plan field, counter prefix, unit per bill unit (audio: ms)
local CAPS = {
    { "audio", "max_audio_seconds_per_day", "ma:", 1000 },
    { "chars", "max_speech_chars_per_day", "mc:", 1 },
    { "images", "max_images_per_day", "mi:", 1 },
}

local _M = {}

-- What plans.compile keeps of snapshot plan `p`: { [bill field] = cap } or nil.
function _M.compile(p)
    local out
    for i = 1, #CAPS do
        local v = p[CAPS[i][2]]
        if type(v) == "number" and v >= 1 then
            out = out or {}
            out[CAPS[i][1]] = v * CAPS[i][4]
        end
    end
    return out
end

-- Snapshot validation of plan `p` at `where`: nil, or what is wrong.
function _M.validate(p, where)
    for i = 1, #CAPS do
        local v = p[CAPS[i][2]]
        if v ~= nil and type(v) ~= "userdata"
           and (type(v) ~= "number" or v < 1 or floor(v) ~= v) then
            return where .. "." .. CAPS[i][2] .. ": must be an integer >= 1 or null"
        end
    end
    return nil
end

-- Access step, after sluice.media_usage.note (ctx.usage.media) and the plan's other
-- limits: reserve the bill on the caps of `consumer`'s plan for `model_name` (a
-- plan's model override keeps the plan's caps) in compiled snapshot `snap`. Returns
-- nil, or status, type, message, extra (nothing held then). Sets
-- ctx.usage.media.held and the counter keys.
function _M.reserve(ctx, snap, consumer, model_name)
    local plan = consumer.plan_id and snap.plans[consumer.plan_id]
    local lim = plan and (plan.models[model_name] or plan.base)
    local caps = lim and lim.media_caps
    local u = ctx.usage
    local bill = u and u.media
    if not caps or not bill then
        return nil
    end
    local now = ngx_time()
    local day, ttl = os_date("!%Y%m%d", now), limits.to_next_day(now)
    local keys, amounts, maxes, which, n = {}, {}, {}, {}, 0
    for i = 1, #CAPS do
        local cap = caps[CAPS[i][1]]
        if cap then
            n = n + 1
            keys[n] = CAPS[i][3] .. consumer.key_id .. ":" .. day
            amounts[n] = floor(bill[CAPS[i][1]] * CAPS[i][4] + 0.5)
            maxes[n], which[n] = cap, CAPS[i]
        end
    end
    local refused, wait, why = limits.take_caps(keys, amounts, maxes, ttl)
    if refused == "unavailable" then   -- cluster mode: Redis down, failure = "closed"
        return 503, "backend_unavailable", why, { retry_after = wait }
    elseif refused then
        local name, unit = which[refused][2], which[refused][4]
        metrics.inc("sluice_rate_limited_total", 1, model_name, lim.name, name)
        return 429, "rate_limited", "the plan's " .. name .. " ("
               .. floor(maxes[refused] / unit) .. ") is used up for today",
               { retry_after = ttl }
    end
    local held = {}
    for j = 1, n do
        local key = keys[j]
        if key then
            held[key] = amounts[j]
            bill[which[j][1] .. "_key"] = key
        end
    end
    bill.held = held
    return nil
end

-- Log phase (sluice.usage): settle what the request held; `audio` is the seconds it
-- bills now (the answer's), `status` its status.
function _M.settle(ctx, status, audio)
    local u = ctx.usage
    local bill = u and u.media
    local held = bill and bill.held
    if not held then
        return
    end
    bill.held = nil
    if status >= 400 or status == 202 then   -- failed; or a job, which bills when it runs
        for k, n in pairs(held) do limits.add(k, -n) end
        return
    end
    local key = bill.audio_key
    if key and audio then
        local diff = floor(audio * 1000 + 0.5) - (held[key] or 0)
        if diff ~= 0 then
            limits.add(key, diff)
        end
    end
end

return _M
