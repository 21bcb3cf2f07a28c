-- Structural equality of decoded JSON (sluice/same.lua), against cjson's decode.
local same = require("sluice.same").same
local cjson = require("cjson.safe")

local T = {}

local function eq(a, b)
    return same(cjson.decode(a), cjson.decode(b))
end

function T.equal_documents()
    assert(eq('{"a":1,"b":[1,2,{"c":null}],"d":"x"}', '{"d":"x","b":[1,2,{"c":null}],"a":1}'))
    assert(eq('[]', '[]') and eq('{}', '{}') and eq('null', 'null') and eq('3', '3.0'))
end

function T.different_documents()
    assert(not eq('{"a":1}', '{"a":2}'))
    assert(not eq('{"a":1}', '{"a":1,"b":2}'), "a key more")
    assert(not eq('{"a":1,"b":2}', '{"a":1}'), "a key less")
    assert(not eq('[1,2]', '[2,1]'), "order of an array")
    assert(not eq('{"a":null}', '{"a":false}'))
    assert(not eq('{"a":"1"}', '{"a":1}'))
    assert(not eq('{"a":{"b":[1,{"c":3}]}}', '{"a":{"b":[1,{"c":4}]}}'), "deep")
end

function T.scalars()
    assert(same(1, 1) and not same(1, "1") and same(nil, nil) and not same({}, nil))
end

return T
