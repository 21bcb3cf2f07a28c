-- A plan's caps on realtime sessions (GET /v1/realtime, sluice/realtime.lua): from the
-- snapshot's plans, validated with them (sluice.validate) and compiled into the
-- snapshot the hot path reads (sluice.config: `realtime_caps`).
--
--   realtime_sessions    sessions a consumer may hold open at once, per gateway
--                        (null: no cap)
--   realtime_session_s   the longest a session may last, in seconds (null: no cap;
--                        the model's timeout_ms still closes an idle one)
--
-- Pure: no ngx.*, so it runs under plain luajit.
local cjson = require("cjson.safe")

local type = type
local pairs = pairs
local tostring = tostring
local floor = math.floor

local json_null = cjson.null

local FIELDS = { realtime_sessions = "sessions", realtime_session_s = "session_s" }

local _M = {}

local function present(v)
    return v ~= nil and v ~= json_null
end

-- Returns nil, or a message naming the first bad field. `plans`: the snapshot's
-- plans object (checked as a whole by sluice.plans).
function _M.validate(plans)
    if type(plans) ~= "table" then
        return nil
    end
    for id, p in pairs(plans) do
        if type(p) == "table" then
            for name in pairs(FIELDS) do
                local v = p[name]
                if present(v) and (type(v) ~= "number" or v < 1 or floor(v) ~= v) then
                    return "plans." .. tostring(id) .. "." .. name
                           .. ": must be an integer >= 1 or null"
                end
            end
        end
    end
    return nil
end

-- Snapshot plans -> { [plan id string] = { sessions =, session_s = } } for the plans
-- that cap anything.
function _M.compile(plans)
    local out = {}
    if type(plans) ~= "table" then
        return out
    end
    for id, p in pairs(plans) do
        local caps
        for name, field in pairs(FIELDS) do
            local v = type(p) == "table" and p[name]
            if present(v) and type(v) == "number" then
                caps = caps or { name = p.name }
                caps[field] = v
            end
        end
        if caps then
            out[tostring(id)] = caps
        end
    end
    return out
end

return _M
