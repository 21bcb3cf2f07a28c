-- The per-IP limit's caller address (sluice/client_ip.lua): X-Forwarded-For only from
-- trusted proxies, IPv6 by prefix.
local client_ip = require("sluice.client_ip")

local T = {}

local function nets(list)
    local out = {}
    for i, cidr in ipairs(list) do
        out[i] = assert(client_ip.network(cidr))
    end
    return out
end

local function eq(got, want)
    assert(got == want, "got " .. tostring(got) .. ", want " .. tostring(want))
end

function T.ipv4_is_its_own_key()
    eq(client_ip.key("203.0.113.7", nil, {}, 64), "203.0.113.7")
end

function T.ipv6_counts_by_its_64()
    local a = client_ip.key("2001:db8:1:2:aaaa::1", nil, {}, 64)
    eq(a, "2001:db8:1:2:0:0:0:0/64")
    eq(client_ip.key("2001:db8:1:2:ffff:1:2:3", nil, {}, 64), a)
    eq(client_ip.key("2001:db8:1:3::1", nil, {}, 64), "2001:db8:1:3:0:0:0:0/64")
    eq(client_ip.key("2001:db8:1:2:8000::1", nil, {}, 65), "2001:db8:1:2:8000:0:0:0/65")
    eq(client_ip.key("::1", nil, {}, 128), "0:0:0:0:0:0:0:1/128")
end

function T.xff_ignored_from_an_untrusted_peer()
    eq(client_ip.key("198.51.100.9", "203.0.113.7", nets({ "10.0.0.0/8" }), 64),
       "198.51.100.9")
    eq(client_ip.key("10.1.2.3", "203.0.113.7", {}, 64), "10.1.2.3")
end

function T.xff_from_a_trusted_peer_rightmost_untrusted_hop()
    local trusted = nets({ "10.0.0.0/8", "fd00::/8" })
    eq(client_ip.key("10.1.2.3", "203.0.113.7", trusted, 64), "203.0.113.7")
    -- the caller's own claim (left) is not believed; trusted hops are skipped
    eq(client_ip.key("10.1.2.3", "1.1.1.1, 203.0.113.7, 10.9.9.9", trusted, 64),
       "203.0.113.7")
    eq(client_ip.key("fd00::5", { "2001:db8::1", "10.0.0.1" }, trusted, 64),
       "2001:db8:0:0:0:0:0:0/64")
    -- all trusted: the leftmost; a malformed hop: the last good one stands
    eq(client_ip.key("10.1.2.3", "10.0.0.1", trusted, 64), "10.0.0.1")
    eq(client_ip.key("10.1.2.3", "junk", trusted, 64), "10.1.2.3")
end

function T.networks()
    assert(not client_ip.network("10.0.0.0/33"))
    assert(not client_ip.network("nonsense"))
    assert(not client_ip.network("1:2:3"))
    assert(not client_ip.network("1::2::3"))
    local n = nets({ "192.168.0.0/23", "2001:db8:80::/41" })
    eq(client_ip.key("192.168.1.200", "9.9.9.9", n, 64), "9.9.9.9")
    eq(client_ip.key("192.168.2.1", "9.9.9.9", n, 64), "192.168.2.1")
    eq(client_ip.key("2001:db8:ff::1", "9.9.9.9", n, 64), "9.9.9.9")
    eq(client_ip.key("2001:db8:100::1", "9.9.9.9", n, 64), "2001:db8:100:0:0:0:0:0/64")
    eq(client_ip.key("::ffff:10.0.0.1", nil, {}, 128), "0:0:0:0:0:ffff:a00:1/128")
end

return T
