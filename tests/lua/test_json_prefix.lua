-- The streamed check of tool arguments (sluice/json_prefix.lua): text fed in pieces
-- stays true while it may still become one JSON object, false from the piece that
-- breaks it; every split of a document gives the same answer as the whole.
local jp = require("sluice.json_prefix")

local T = {}

local function fed(...)
    local s = jp.new()
    local ok = true
    for _, piece in ipairs({ ... }) do
        ok = jp.feed(s, piece)
    end
    return ok
end

-- every split of `text` in two, and one byte at a time, answers `want`
local function every_split(text, want)
    for i = 0, #text do
        assert(fed(text:sub(1, i), text:sub(i + 1)) == want, text .. " split at " .. i)
    end
    local s, ok = jp.new(), true
    for i = 1, #text do
        ok = jp.feed(s, text:sub(i, i))
    end
    assert(ok == want, text .. " byte by byte")
end

function T.whole_objects()
    for _, text in ipairs({ '{}', ' { } ', '{"query": "weather in Oslo"}',
                            '{"a":[1,-2.5e+3,0,0.1E9,true,false,null,{"b":[]}],"c":{}}',
                            '{"s":"q\\"uote\\\\ \\/ \\n \\u00e9\\uD83D\\uDE00"}',
                            '{"k" : "v" , "n" : [ 1 , 2 ] }\n' }) do
        every_split(text, true)
    end
end

function T.prefixes_of_objects()
    for _, text in ipairs({ '', '{', '{"que', '{"query": "wea', '{"a": [1, 2', '{"a": tr',
                            '{"a": -', '{"a": 1.', '{"a": 1e', '{"s": "\\u00' }) do
        every_split(text, true)
    end
end

function T.broken_text()
    for _, text in ipairs({ '{"query": x}', '[1]', '"str"', '5', 'nul', '{"a" 1}',
                            '{"a": 01}', '{"a": 1.e5}', '{"a": tru }', '{"a": [1,]x',
                            '{"a": "b"]', '{"a": 1}}', '{} {}', '{"a": "\\x"}',
                            '{"a": "\\u12G4"}', '{"a":\n"line\nbreak"}', '{,}', '{"a":1,}',
                            '{1: 2}', '{"a": -x}', '{"a": 1e+}' }) do
        every_split(text, false)
    end
end

function T.stays_broken()
    local s = jp.new()
    assert(jp.feed(s, '{"a": x') == false)
    assert(jp.feed(s, '}') == false)
end

return T
