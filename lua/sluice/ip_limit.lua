-- The listener-wide per-IP limit: a token bucket per caller address (sluice.client_ip
-- says which), taken before anything else of a request (sluice.steps: before the key
-- lookup), so a flood from one address, bad keys included, is cut before it costs
-- more. The snapshot's "ip_limit" section (docs/contracts.md), from SLUICE_IP_RATE,
-- SLUICE_IP_BURST and SLUICE_TRUSTED_PROXIES: { rate = <per second, null: off>,
-- burst = <tokens>, trusted_proxies = [<CIDR>, ...], ipv6_prefix = <bits, 64> }.
local client_ip = require("sluice.client_ip")
local take = require("sluice.limits").take

local ngx = ngx
local type = type
local ipairs = ipairs
local max = math.max
local ceil = math.ceil

local _M = {}

local function positive(v)
    return type(v) == "number" and v > 0
end

-- nil, or a message naming the bad field.
function _M.validate(section)
    if section == nil then
        return nil
    end
    if type(section) ~= "table" then
        return "ip_limit: must be an object"
    end
    if section.rate ~= nil and section.rate ~= ngx.null and not positive(section.rate) then
        return "ip_limit.rate: must be a positive number or null"
    end
    if section.burst ~= nil and not positive(section.burst) then
        return "ip_limit.burst: must be a positive number"
    end
    local p = section.ipv6_prefix
    if p ~= nil and not (type(p) == "number" and p >= 1 and p <= 128 and p % 1 == 0) then
        return "ip_limit.ipv6_prefix: must be an integer from 1 to 128"
    end
    local nets = section.trusted_proxies
    if nets ~= nil and type(nets) ~= "table" then
        return "ip_limit.trusted_proxies: must be a list of CIDRs"
    end
    for i, cidr in ipairs(nets or {}) do
        local _, err = client_ip.network(cidr)
        if err then
            return "ip_limit.trusted_proxies[" .. i .. "]: " .. err
        end
    end
    return nil
end

-- The compiled section, or false when there is no limit.
function _M.compile(section)
    if type(section) ~= "table" or not positive(section.rate) then
        return false
    end
    local nets = {}
    for _, cidr in ipairs(section.trusted_proxies or {}) do
        nets[#nets + 1] = client_ip.network(cidr)
    end
    return { rate = section.rate, burst = section.burst or 1, nets = nets,
             prefix = section.ipv6_prefix or 64 }
end

-- The caller's bucket address under the listener's trusted proxies and IPv6 prefix
-- (`limit`: the compiled section, or false: none trusted, /64): read once per request
-- and given to check and check_plan.
local NO_PROXIES = { nets = {}, prefix = 64 }

function _M.address(limit)
    limit = limit or NO_PROXIES
    local var = ngx.var
    return client_ip.key(var.remote_addr, limit.nets[1] and var.http_x_forwarded_for,
                         limit.nets, limit.prefix)
end

local function take_or_refuse(key, rate, burst)
    local admitted, _, _, wait = take(key, rate, burst)
    if admitted == false then   -- (nil: the dict failed; the request goes on)
        return 429, "rate_limited", "too many requests from this address",
               { retry_after = wait }
    end
    return nil
end

-- Take a token of the caller's bucket under `limit` (compiled) for `address`
-- (_M.address): nil, or 429 and what the error template says.
function _M.check(limit, address)
    return take_or_refuse("ip:" .. address, limit.rate, limit.burst)
end

-- A plan's `rate_per_ip` (sluice.plans: plan.per_ip): a bucket per plan and address,
-- one second's worth of burst.
function _M.check_plan(plan_id, rate, address)
    return take_or_refuse("ipp:" .. plan_id .. ":" .. address, rate, max(1, ceil(rate)))
end

return _M
