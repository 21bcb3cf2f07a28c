-- multipart/form-data as the upload endpoints read it (sluice/multipart.lua): the
-- boundary, the parts of a head, a tail and a whole body, and malformed bodies.
local mp = require("sluice.multipart")

local T = {}

local B = "XyZ123"

local function body(parts, close)
    local out = {}
    for _, p in ipairs(parts) do
        out[#out + 1] = "--" .. B .. "\r\n"
        local cd = 'Content-Disposition: form-data; name="' .. p[1] .. '"'
        if p.filename then
            cd = cd .. '; filename="' .. p.filename .. '"'
        end
        out[#out + 1] = cd .. "\r\n"
        if p.type then
            out[#out + 1] = "Content-Type: " .. p.type .. "\r\n"
        end
        out[#out + 1] = "\r\n" .. p[2] .. "\r\n"
    end
    if close ~= false then
        out[#out + 1] = "--" .. B .. "--\r\n"
    end
    return table.concat(out)
end

function T.boundary_from_content_type()
    assert(mp.boundary("multipart/form-data; boundary=" .. B) == B)
    assert(mp.boundary('Multipart/Form-Data; charset=utf-8; BOUNDARY="a b;c"') == "a b;c")
    assert(mp.boundary("multipart/form-data; boundary=abc; x=1") == "abc")
end

function T.boundary_refusals()
    local _, err = mp.boundary("application/json")
    assert(err:find("multipart/form%-data"), err)
    _, err = mp.boundary(nil)
    assert(err, "no content type")
    _, err = mp.boundary("multipart/form-data")
    assert(err:find("no boundary"), err)
    _, err = mp.boundary("multipart/form-data; boundary=" .. string.rep("a", 71))
    assert(err:find("70"), err)
end

function T.whole_body_fields_and_file()
    local audio = "RIFF\0\0\r\n--not-the-boundary\r\n\0WAVE"
    local b = body({ { "model", "asr-demo" }, { "language", "zh" },
                     { "file", audio, filename = "a.wav", type = "Audio/WAV" } })
    local parts, closed = mp.parse(b, B)
    assert(closed == true)
    assert(#parts == 3)
    assert(mp.value(b, parts, "model") == "asr-demo")
    assert(mp.value(b, parts, "language") == "zh")
    local f = mp.find(parts, "file")
    assert(f.filename == "a.wav" and f.content_type == "audio/wav")
    assert(b:sub(f.from, f.to) == audio, "the file's bytes, CRLF inside kept")
    assert(mp.value(b, parts, "file") == nil, "a file is no plain field")
    assert(mp.value(b, parts, "prompt") == nil)
end

function T.head_cut_inside_the_file()
    local b = body({ { "model", "m1" }, { "file", string.rep("x", 1000), filename = "f" } })
    local head = b:sub(1, 300)
    local parts, closed = mp.parse(head, B)
    assert(closed == false)
    assert(mp.value(head, parts, "model") == "m1")
    local f = mp.find(parts, "file")
    assert(f and f.from and f.to == nil, "the file is cut")
end

function T.head_cut_inside_headers_or_delimiter()
    local b = body({ { "model", "m1" }, { "file", "abc", filename = "f" } })
    for cut = 1, #b do
        local parts = mp.parse(b:sub(1, cut), B)
        assert(parts, "cut at " .. cut)
        local m = mp.value(b:sub(1, cut), parts, "model")
        assert(m == nil or m == "m1", "cut at " .. cut)
    end
end

function T.tail_reads_from_the_next_delimiter()
    local b = body({ { "file", string.rep("y", 500), filename = "f" }, { "model", "late" },
                     { "response_format", "text" } })
    local tail = b:sub(#b - 250)
    assert(tail:sub(1, 3) == "yyy", "cut inside the file")
    local parts, closed = mp.parse(tail, B)
    assert(closed == true)
    assert(mp.value(tail, parts, "model") == "late")
    assert(mp.value(tail, parts, "response_format") == "text")
end

function T.preamble_is_skipped()
    local b = "preamble text\r\n" .. body({ { "model", "m" } })
    local parts = mp.parse(b, B)
    assert(mp.value(b, parts, "model") == "m")
end

function T.malformed_parts()
    local parts, err = mp.parse("--" .. B .. "\r\nContent-Type: text/plain\r\n\r\nx\r\n--"
                                .. B .. "--", B)
    assert(parts == nil and err:find("name"), err)
    parts, err = mp.parse("--" .. B .. "garbage\r\n", B)
    assert(parts == nil and err:find("CRLF"), err)
    parts, err = mp.parse("--" .. B .. "\r\n" .. string.rep("h", 9000), B)
    assert(parts == nil and err:find("too long"), err)
end

function T.no_delimiter_no_parts()
    local parts, closed = mp.parse('{"model": "x"}', B)
    assert(parts and #parts == 0 and closed == false)
end

return T
