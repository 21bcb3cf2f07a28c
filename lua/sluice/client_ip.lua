-- The caller's address as the per-IP limit counts it (sluice.ip_limit), pure Lua (no
-- ngx): unit-tested with plain luajit (tests/lua/test_client_ip.lua).
--
-- X-Forwarded-For is honoured only from a trusted proxy: the peer must be inside one of
-- the configured CIDRs, and then the list is read from the right, skipping further
-- trusted hops; the first address that is not trusted is the caller (one a caller wrote
-- itself, left of that, is never believed). An IPv6 caller counts by its prefix (/64 by
-- default: one host holds a whole /64), an IPv4 caller by its address.
local tonumber = tonumber
local floor = math.floor
local find = string.find
local sub = string.sub
local format = string.format

local _M = {}

-- "a.b.c.d" -> its 32-bit number, or nil.
local function v4(s)
    local a, b, c, d = s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    if not a then
        return nil
    end
    a, b, c, d = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
    if a > 255 or b > 255 or c > 255 or d > 255 then
        return nil
    end
    return ((a * 256 + b) * 256 + c) * 256 + d
end

-- Colon-separated hex groups of `s` appended to `out`; false when one is bad. A dotted
-- IPv4 tail (::ffff:1.2.3.4) becomes two groups.
local function groups(s, out)
    if s == "" then
        return true
    end
    for g in (s .. ":"):gmatch("([^:]*):") do
        if find(g, ".", 1, true) then
            local n = v4(g)
            if not n then
                return false
            end
            out[#out + 1] = floor(n / 65536)
            out[#out + 1] = n % 65536
        else
            local n = #g <= 4 and g:match("^%x+$") and tonumber(g, 16)
            if not n then
                return false
            end
            out[#out + 1] = n
        end
    end
    return true
end

-- An IPv6 text -> its 8 16-bit groups, or nil. A zone (%eth0) is dropped.
local function v6(s)
    local pct = find(s, "%", 1, true)
    if pct then
        s = sub(s, 1, pct - 1)
    end
    local head, tail = s:match("^(.-)::(.*)$")
    local out = {}
    if not head then
        if not groups(s, out) or #out ~= 8 then
            return nil
        end
        return out
    end
    local rest = {}
    if find(tail, "::", 1, true) or not groups(head, out) or not groups(tail, rest)
       or #out + #rest > 7 then
        return nil
    end
    for _ = #out + #rest + 1, 8 do
        out[#out + 1] = 0
    end
    for i = 1, #rest do
        out[#out + 1] = rest[i]
    end
    return out
end

-- An address -> "4", its number; or "6", its groups; or nil.
local function parse(s)
    if find(s, ":", 1, true) then
        local g = v6(s)
        return g and "6", g
    end
    local n = v4(s)
    return n and "4", n
end
_M.parse = parse

-- "10.0.0.0/8", "2001:db8::/32" (a bare address: all its bits) -> a compiled network,
-- or nil and a message.
function _M.network(cidr)
    if type(cidr) ~= "string" then
        return nil, "must be a CIDR string"
    end
    local addr, bits = cidr:match("^([^/]+)/(%d+)$")
    local family, value = parse(addr or cidr)
    if not family then
        return nil, "is not an IP network: " .. cidr
    end
    local max_bits = family == "4" and 32 or 128
    bits = bits and tonumber(bits) or max_bits
    if bits > max_bits then
        return nil, "has a prefix longer than " .. max_bits .. " bits: " .. cidr
    end
    return { family = family, value = value, bits = bits }
end

-- Does the parsed address (family, value) lie inside network `net`?
local function inside(net, family, value)
    if net.family ~= family then
        return false
    end
    local bits = net.bits
    if family == "4" then
        local div = 2 ^ (32 - bits)
        return floor(value / div) == floor(net.value / div)
    end
    local nv = net.value
    local i = 1
    while bits >= 16 do
        if value[i] ~= nv[i] then
            return false
        end
        bits, i = bits - 16, i + 1
    end
    if bits == 0 then
        return true
    end
    local div = 2 ^ (16 - bits)
    return floor(value[i] / div) == floor(nv[i] / div)
end

local function trusted(nets, family, value)
    for i = 1, #nets do
        if inside(nets[i], family, value) then
            return true
        end
    end
    return false
end

-- The bucket's key of a parsed address: an IPv4 address itself, an IPv6 address's
-- first `prefix` bits (the rest zero) as hex groups.
local function key_of(family, value, text, prefix)
    if family == "4" then
        return text
    end
    local parts = {}
    local bits = prefix
    for i = 1, 8 do
        local g = value[i]
        if bits <= 0 then
            g = 0
        elseif bits < 16 then
            local div = 2 ^ (16 - bits)
            g = floor(g / div) * div
        end
        bits = bits - 16
        parts[i] = format("%x", g)
    end
    return table.concat(parts, ":") .. "/" .. prefix
end

-- The key the caller counts under: `remote` is the peer's address (nginx's
-- $remote_addr), `xff` the X-Forwarded-For header (nil, a string, or a table of them),
-- `nets` the compiled trusted proxies, `prefix` the IPv6 prefix length.
function _M.key(remote, xff, nets, prefix)
    local family, value = parse(remote)
    if not family then
        return remote
    end
    local text = remote
    if xff and #nets > 0 and trusted(nets, family, value) then
        if type(xff) == "table" then
            xff = table.concat(xff, ",")
        end
        local hops = {}
        for hop in xff:gmatch("[^,]+") do
            hops[#hops + 1] = hop:match("^%s*(.-)%s*$")
        end
        for i = #hops, 1, -1 do
            local f, v = parse(hops[i])
            if not f then
                break   -- a malformed hop: the last good one stands
            end
            family, value, text = f, v, hops[i]
            if not trusted(nets, f, v) then
                break
            end
        end
    end
    return key_of(family, value, text, prefix)
end

return _M
