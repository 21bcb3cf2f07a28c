-- WebSocket masking by 32-bit words (sluice/ws_frames.lua) against the RFC's byte by
-- byte definition, at every length around the word boundaries.
local frames = require("sluice.ws_frames")
local bit = require("bit")

local T = {}

local function reference(data, key)
    local out = {}
    for i = 1, #data do
        out[i] = string.char(bit.bxor(data:byte(i), key:byte((i - 1) % 4 + 1)))
    end
    return table.concat(out)
end

local function text(n)
    local t = {}
    for i = 1, n do t[i] = string.char((i * 37 + 11) % 256) end
    return table.concat(t)
end

function T.masks_as_the_rfc_says_at_every_length()
    local key = "\1\128\255\66"
    for n = 0, 70 do
        local data = text(n)
        assert(frames.mask(data, 1, n, key) == reference(data, key), "length " .. n)
    end
    local big = text(65536 + 3)
    assert(frames.mask(big, 1, #big, key) == reference(big, key), "64 KiB + 3")
end

function T.unmasking_is_masking_again()
    local key = "abcd"
    local data = text(1001)
    assert(frames.mask(frames.mask(data, 1, #data, key), 1, #data, key) == data)
end

function T.masks_from_an_offset()
    -- a received frame: the key's 4 bytes, then the payload
    local key, payload = "wxyz", text(13)
    local frame = key .. reference(payload, key)
    assert(frames.mask(frame, 5, #payload, frame:sub(1, 4)) == payload)
end

return T
