-- Plans' caps on realtime sessions (sluice/realtime_plans.lua): validation messages
-- and what the gateway compiles from a snapshot's plans.
local realtime_plans = require("sluice.realtime_plans")
local cjson = require("cjson.safe")

local T = {}

local function plans(json)
    return cjson.decode(json)
end

function T.valid_caps_pass()
    assert(realtime_plans.validate(nil) == nil)
    assert(realtime_plans.validate(plans('{"1": {"name": "p", "realtime_sessions": 2, '
                                         .. '"realtime_session_s": 600}}')) == nil)
    assert(realtime_plans.validate(plans('{"1": {"name": "p", "realtime_sessions": null}}'))
           == nil, "null: no cap")
end

function T.bad_caps_are_named()
    local cases = {
        ['{"7": {"realtime_sessions": 0}}'] = "plans.7.realtime_sessions",
        ['{"7": {"realtime_session_s": 1.5}}'] = "plans.7.realtime_session_s",
        ['{"7": {"realtime_sessions": "3"}}'] = "plans.7.realtime_sessions",
    }
    for json, field in pairs(cases) do
        local err = realtime_plans.validate(plans(json))
        assert(err and err:find(field, 1, true) == 1, json .. " -> " .. tostring(err))
    end
end

function T.compiled_by_plan_id_only_where_capped()
    local out = realtime_plans.compile(plans(
        '{"1": {"name": "a", "realtime_sessions": 2}, "2": {"name": "b", '
        .. '"realtime_session_s": 30, "realtime_sessions": null}, "3": {"name": "c"}}'))
    assert(out["1"].sessions == 2 and out["1"].session_s == nil and out["1"].name == "a")
    assert(out["2"].session_s == 30 and out["2"].sessions == nil)
    assert(out["3"] == nil, "a plan without caps compiles to nothing")
    assert(next(realtime_plans.compile(nil)) == nil)
end

return T
