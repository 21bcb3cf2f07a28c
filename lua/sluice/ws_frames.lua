-- WebSocket frames (RFC 6455) read from and written to a cosocket, for the realtime
-- proxy (sluice/realtime_pump.lua): the same contract as lua-resty-websocket's
-- protocol.recv_frame / send_frame, but masking 4 bytes at a time through the FFI
-- where that library XORs byte by byte in Lua (a 64 KiB event each way cost the
-- proxy about a millisecond: bench/README.md, realtime.py). The handshakes and the
-- closing frames stay lua-resty-websocket's.
-- Pure but for the socket it is given: mask() runs under plain luajit.
local ffi = require("ffi")
local bit = require("bit")
local buffer = require("string.buffer")

local byte = string.byte
local char = string.char
local sub = string.sub
local band = bit.band
local bor = bit.bor
local bxor = bit.bxor
local rshift = bit.rshift
local ffi_cast = ffi.cast
local ffi_copy = ffi.copy
local random = math.random

local U32P = ffi.typeof("uint32_t *")
local U8P = ffi.typeof("uint8_t *")
local CU8P = ffi.typeof("const uint8_t *")
local TYPES = { [0x0] = "continuation", [0x1] = "text", [0x2] = "binary", [0x8] = "close",
                [0x9] = "ping", [0xa] = "pong" }

local _M = {}

local out = buffer.new()   -- one frame at a time per worker (no yield while it is used)

-- `n` bytes of string `data` from its byte `from` (1-based), XORed with the 4-byte
-- masking key `key` (a string), as a new string. Masking and unmasking are the same.
local function mask(data, from, n, key)
    if n == 0 then
        return ""
    end
    out:reset()
    local p = out:reserve(n)
    ffi_copy(p, ffi_cast(CU8P, data) + (from - 1), n)
    local k = ffi_cast(CU8P, key)
    local k32 = ffi_cast(U32P, ffi_cast(CU8P, key))[0]   -- the key in memory order
    local words = rshift(n, 2)
    local p32 = ffi_cast(U32P, p)
    for i = 0, words - 1 do
        p32[i] = bxor(p32[i], k32)
    end
    local p8 = ffi_cast(U8P, p)
    for i = words * 4, n - 1 do
        p8[i] = bxor(p8[i], k[i % 4])
    end
    out:commit(n)
    return out:get()
end
_M.mask = mask

-- One frame from `sock`: its payload, its type ("text", "binary", "continuation",
-- "close", "ping", "pong") and "again" when more fragments follow; a close frame:
-- its reason, "close" and its code. On failure nil, nil and a message (a read timeout
-- before a frame begins: "failed to receive the first 2 bytes: timeout").
-- `must_mask`: the peer is a client, whose frames are masked.
function _M.recv(sock, max_len, must_mask)
    local head, err = sock:receive(2)
    if not head then
        return nil, nil, "failed to receive the first 2 bytes: " .. err
    end
    local fst, snd = byte(head, 1, 2)
    local fin = band(fst, 0x80) ~= 0
    if band(fst, 0x70) ~= 0 then
        return nil, nil, "bad RSV1, RSV2, or RSV3 bits"
    end
    local opcode = band(fst, 0x0f)
    local typ = TYPES[opcode]
    if not typ then
        return nil, nil, "reserved opcode " .. opcode
    end
    local masked = band(snd, 0x80) ~= 0
    if must_mask and not masked then
        return nil, nil, "frame unmasked"
    end
    local len = band(snd, 0x7f)
    if len == 126 then
        local ext
        ext, err = sock:receive(2)
        if not ext then
            return nil, nil, "failed to receive the 2 byte payload length: " .. err
        end
        local b1, b2 = byte(ext, 1, 2)
        len = b1 * 256 + b2
    elseif len == 127 then
        local ext
        ext, err = sock:receive(8)
        if not ext then
            return nil, nil, "failed to receive the 8 byte payload length: " .. err
        end
        local b1, b2, b3, b4, b5, b6, b7, b8 = byte(ext, 1, 8)
        if b1 ~= 0 or b2 ~= 0 or b3 ~= 0 or b4 ~= 0 then
            return nil, nil, "payload len too large"
        end
        len = ((b5 * 256 + b6) * 256 + b7) * 256 + b8
    end
    if opcode >= 0x8 and (len > 125 or not fin) then
        return nil, nil, "bad control frame"
    end
    if len > max_len then
        return nil, nil, "exceeding max payload len"
    end
    local rest = masked and len + 4 or len
    local data = ""
    if rest > 0 then
        data, err = sock:receive(rest)
        if not data then
            return nil, nil, "failed to read masking-len and payload: " .. err
        end
    end
    local payload = masked and mask(data, 5, len, sub(data, 1, 4)) or data
    if opcode == 0x8 then
        if len == 0 then
            return "", "close", nil
        elseif len < 2 then
            return nil, nil, "close frame with a body must carry a 2-byte status code"
        end
        local c1, c2 = byte(payload, 1, 2)
        return sub(payload, 3), "close", c1 * 256 + c2
    end
    return payload, typ, not fin and "again" or nil
end

-- Send one frame on `sock`; `masked`: we are the client (a fresh random key).
-- Returns the bytes sent, or nil and a message.
function _M.send(sock, fin, opcode, payload, masked)
    local len = #payload
    local fst = bor(fin and 0x80 or 0, opcode)
    local snd, ext
    if len <= 125 then
        snd, ext = len, ""
    elseif len <= 65535 then
        snd, ext = 126, char(rshift(len, 8), band(len, 0xff))
    else
        snd, ext = 127, char(0, 0, 0, 0, band(rshift(len, 24), 0xff),
                             band(rshift(len, 16), 0xff), band(rshift(len, 8), 0xff),
                             band(len, 0xff))
    end
    local key, body = "", payload
    if masked then
        snd = bor(snd, 0x80)
        key = char(random(0, 255), random(0, 255), random(0, 255), random(0, 255))
        body = mask(payload, 1, len, key)
    end
    local bytes, err = sock:send({ char(fst, snd), ext, key, body })
    if not bytes then
        return nil, "failed to send frame: " .. err
    end
    return bytes
end

return _M
