-- multipart/form-data (RFC 7578) as the upload endpoints read it: the boundary from
-- the Content-Type, and the parts of a piece of the body, each as its headers and
-- the offsets of its data in that piece. Nothing is copied but the small fields a
-- caller asks for: a 50 MiB `file` part is two numbers.
--
-- A piece may be the start of the body (its head: the fields before the file, as
-- OpenAI's clients send them), its end (its tail: fields after the file), or all of
-- it. A part whose closing delimiter is not in the piece is cut: it has `from` but no
-- `to`. parse() starts at the piece's first delimiter line, so a tail cut anywhere
-- reads from the next part on.
--
-- Pure Lua: tests/lua/test_multipart.lua runs it under plain luajit.
local str_find = string.find
local str_sub = string.sub
local str_lower = string.lower
local str_match = string.match
local type = type

local MAX_HEADERS = 8 * 1024   -- bytes of one part's header block we read
local MAX_PARTS = 64

local _M = {}

-- The boundary of a multipart/form-data Content-Type, or nil and why not.
function _M.boundary(content_type)
    if type(content_type) ~= "string" then
        return nil, "the request must be multipart/form-data"
    end
    local lower = str_lower(content_type)
    if not str_find(lower, "^%s*multipart/form%-data") then
        return nil, "the request must be multipart/form-data"
    end
    -- the parameter's name is case-insensitive, its value is not
    local at = str_find(lower, "boundary=", 1, true)
    if not at then
        return nil, "the multipart/form-data Content-Type has no boundary"
    end
    local b = str_sub(content_type, at + 9)
    local quoted = str_match(b, '^"([^"]+)"')
    b = quoted or str_match(b, "^[^;%s]+")
    if not b or #b > 70 then
        return nil, "the multipart/form-data boundary is missing or longer than 70 bytes"
    end
    return b
end

-- A Content-Disposition's parameter `name` (quoted or token), or nil.
local function param(disposition, name)
    local v = str_match(disposition, ";%s*" .. name .. '="([^"]*)"')
    if v then
        return v
    end
    return str_match(disposition, ";%s*" .. name .. "=([^;%s]+)")
end

-- The parts of `piece` (a string), in order, at most MAX_PARTS: each
-- { name =, filename = (nil: a plain field), content_type = (nil: none sent),
--   from = first byte of its data, to = last byte (nil: cut by the piece's end) }.
-- Returns the list and whether the closing delimiter ("--boundary--") was seen; or
-- nil and why the piece is malformed.
function _M.parse(piece, boundary)
    local delim = "--" .. boundary
    local s, e = str_find(piece, delim, 1, true)
    if s and s > 1 then
        -- not at the start: only a delimiter at the start of a line counts
        s, e = str_find(piece, "\r\n" .. delim, 1, true)
        if s then
            s = s + 2
        end
    end
    local parts = {}
    while s do
        local after = str_sub(piece, e + 1, e + 2)
        if after == "--" then
            return parts, true
        end
        if after ~= "\r\n" then
            if #after < 2 then
                return parts, false   -- cut right after the delimiter
            end
            return nil, "a multipart delimiter is not followed by CRLF"
        end
        local hstart = e + 3
        local hend = str_find(piece, "\r\n\r\n", hstart, true)
        if not hend then
            if #piece - hstart > MAX_HEADERS then
                return nil, "a multipart part's headers are too long"
            end
            return parts, false
        end
        if hend - hstart > MAX_HEADERS then
            return nil, "a multipart part's headers are too long"
        end
        local part = { from = hend + 4 }
        local headers = str_sub(piece, hstart, hend + 1)
        for line in headers:gmatch("([^\r\n]+)\r\n") do
            local k, v = str_match(line, "^([^:]+):%s*(.-)%s*$")
            if k then
                k = str_lower(k)
                if k == "content-disposition" then
                    part.name = param(v, "name")
                    part.filename = param(v, "filename")
                elseif k == "content-type" then
                    part.content_type = str_lower(v)
                end
            end
        end
        if not part.name then
            return nil, "a multipart part has no Content-Disposition name"
        end
        parts[#parts + 1] = part
        if #parts > MAX_PARTS then
            return nil, "more than " .. MAX_PARTS .. " multipart parts"
        end
        s, e = str_find(piece, "\r\n" .. delim, part.from, true)
        if not s then
            return parts, false
        end
        part.to = s - 1
        s = s + 2
    end
    return parts, false
end

-- The first part named `name` in `parts`, or nil.
function _M.find(parts, name)
    for i = 1, #parts do
        if parts[i].name == name then
            return parts[i]
        end
    end
    return nil
end

-- The value of plain field `name` in `piece` (a string), or nil when absent or cut.
function _M.value(piece, parts, name)
    local p = _M.find(parts, name)
    if p and p.to and not p.filename then
        return str_sub(piece, p.from, p.to)
    end
    return nil
end

return _M
