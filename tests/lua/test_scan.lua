-- The bounded `usage` scan (sluice/scan.lua) is exact: on every answer below it
-- either declines (nil: the caller decodes) or gives the *_tokens members that
-- cjson's decode of the whole answer gives.
local scan = require("sluice.scan")
local cjson = require("cjson.safe")

local T = {}

local function at(body)
    return (body:find('"usage"', 1, true))
end

local COUNTS = { "prompt_tokens", "completion_tokens", "total_tokens" }

-- The scan's answer must equal the decode's three counts.
local function same_as_decode(body)
    local got = scan.usage(body, at(body))
    if got == nil then
        return nil
    end
    local usage = cjson.decode(body).usage
    for _, k in ipairs(COUNTS) do
        assert(got[k] == usage[k], k .. ": scan " .. tostring(got[k]) .. ", decode "
               .. tostring(usage[k]))
    end
    return got
end

local OPENAI = '{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",'
    .. '"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},'
    .. '"finish_reason":"stop"}],'
    .. '"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}'

function T.openai_flat()
    local u = same_as_decode(OPENAI)
    assert(u and u.prompt_tokens == 5 and u.completion_tokens == 2 and u.total_tokens == 7)
end

function T.spaces_and_order()
    local body = '{"usage" : { "total_tokens" : 12 ,\n "completion_tokens": 4,'
        .. ' "prompt_tokens":8 } }'
    local u = same_as_decode(body)
    assert(u and u.total_tokens == 12 and u.prompt_tokens == 8)
end

function T.other_members_ignored()
    local body = '{"usage":{"note":"a,b:c","prompt_tokens":1,"completion_tokens":2}}'
    local u = same_as_decode(body)
    assert(u and u.prompt_tokens == 1 and u.completion_tokens == 2 and not u.note)
end

function T.declines_nested_details()
    -- counts after a nested object would be missed by a cut at the first "}"
    local body = '{"usage":{"total_tokens":9,"prompt_tokens_details":{"cached_tokens":3},'
        .. '"prompt_tokens":5,"completion_tokens":4}}'
    assert(scan.usage(body, at(body)) == nil)
end

function T.declines_non_integers()
    for _, v in ipairs({ "5.0", "5e2", "null", "-1", "05", '"5"', "true" }) do
        local body = '{"usage":{"prompt_tokens":' .. v .. ',"completion_tokens":1,'
            .. '"total_tokens":6}}'
        assert(scan.usage(body, at(body)) == nil, "accepted " .. v)
    end
end

function T.declines_brace_in_string()
    local body = '{"usage":{"prompt_tokens":1,"note":"x}y","completion_tokens":2,'
        .. '"total_tokens":30}}'
    assert(scan.usage(body, at(body)) == nil)
end

function T.declines_duplicates()
    local body = '{"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens":3}}'
    assert(scan.usage(body, at(body)) == nil)
    body = '{"usage":{"note":"prompt_tokens","prompt_tokens":1,"completion_tokens":2}}'
    assert(scan.usage(body, at(body)) == nil, "a string equal to a key first: decode")
    body = '{"usage":{"prompt_tokens":1,"note":"prompt_tokens","completion_tokens":2}}'
    assert(scan.usage(body, at(body)) == nil, "a string equal to a key after it: decode")
end

function T.other_counts_ignored()
    local body = '{"usage":{"prompt_tokens":1,"completion_tokens":2,"reasoning_tokens":9}}'
    local u = same_as_decode(body)
    assert(u and u.reasoning_tokens == nil and u.prompt_tokens == 1)
end

function T.declines_escapes()
    local body = '{"usage":{"note":"\\"q\\"","prompt_tokens":1,"completion_tokens":2}}'
    assert(scan.usage(body, at(body)) == nil)
end

function T.declines_incomplete()
    assert(scan.usage('{"usage":{"prompt_tokens":1}}', 2) == nil, "no total, no completion")
    assert(scan.usage('{"usage":{"prompt_tokens":1', 2) == nil, "cut off")
    assert(scan.usage('{"usage":[1,2]}', 2) == nil, "not an object")
end

function T.many_generated_answers()
    -- every combination of members, order and spacing: the scan is exact or declines
    local members = { '"prompt_tokens":%d', '"completion_tokens":%d', '"total_tokens":%d',
                      '"note":"x"', '"ratio":0.5', '"cached_tokens":%d' }
    local n, accepted = 0, 0
    for mask = 1, 63 do
        for _, sp in ipairs({ "", " ", "\n  " }) do
            local parts, v = {}, 3
            for i = 1, #members do
                if mask % (2 ^ i) >= 2 ^ (i - 1) then
                    v = v + 7
                    parts[#parts + 1] = members[i]:format(v)
                end
            end
            local body = '{"id":"x","usage":{' .. sp .. table.concat(parts, "," .. sp)
                .. sp .. '},"z":1}'
            n = n + 1
            if same_as_decode(body) then accepted = accepted + 1 end
        end
    end
    assert(n == 189 and accepted > 0, n .. " answers, " .. accepted .. " scanned")
end

-- Generated usage objects (whitespace, member order, other members, values plain
-- or not): whenever the scan answers, its counts are the decode's; and it answers
-- every flat one whose counts are plain integers.
function T.generated_objects_agree_with_the_decode()
    math.randomseed(13)
    local SPACES = { "", " ", "  ", "\n", "\t", "\r\n " }
    local PLAIN = { "0", "7", "12", "4096", "123456789", "123456789012345" }
    local ODD = { "5.0", "1e3", "-2", "007", "null", '"3"', "true", "1234567890123456" }
    local function ws() return SPACES[math.random(#SPACES)] end
    local answered = 0
    for _ = 1, 3000 do
        local members, plain = {}, true
        for _, k in ipairs(COUNTS) do
            if math.random(5) > 1 then
                local v = PLAIN[math.random(#PLAIN)]
                if math.random(8) == 1 then
                    v, plain = ODD[math.random(#ODD)], false
                end
                members[#members + 1] = '"' .. k .. '"' .. ws() .. ":" .. ws() .. v
            end
        end
        if math.random(3) == 1 then
            members[#members + 1] = '"note"' .. ws() .. ":" .. ws() .. '"a, b: c"'
        end
        for i = #members, 2, -1 do
            local j = math.random(i)
            members[i], members[j] = members[j], members[i]
        end
        local parts = {}
        for i, m in ipairs(members) do
            parts[i] = ws() .. m .. ws()
        end
        local body = '{"id":"x","usage"' .. ws() .. ":" .. ws() .. "{"
            .. table.concat(parts, ",") .. "}" .. ws() .. "}"
        local doc = cjson.decode(body)
        assert(doc, body)
        local got = same_as_decode(body)
        local u = doc.usage
        local enough = u.total_tokens ~= nil or (u.prompt_tokens ~= nil and u.completion_tokens ~= nil)
        if plain and enough then
            assert(got, "declined a flat object: " .. body)
        end
        if got then answered = answered + 1 end
    end
    assert(answered > 1000, "answered only " .. answered)
end

return T
