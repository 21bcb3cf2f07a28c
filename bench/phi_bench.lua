-- The nginx side of bench/phi.py (not the product): GET /corpus runs the PHI
-- detectors over the labelled corpus; POST /cost times scanners over the body.
local cjson = require("cjson.safe")
local phi = require("sluice.phi")
local phi_scan = require("sluice.phi_scan")
local pii = require("sluice.pii")

local ngx = ngx
local re_gsub = ngx.re.gsub
local clock = os.clock

local JSON_STRING = [["(?:[^"\\]++|\\.)*+"]]

local _M = {}

-- one JSON line per corpus line: the hits, as { class, from, to } (byte offsets)
function _M.corpus()
    local policy = phi_scan.compile({ ["*"] = "log" })
    local out = {}
    for line in io.lines(ngx.var.arg_path) do
        local row = cjson.decode(line)
        local st = { counts = {}, seen = {}, next = {} }
        assert(phi_scan.scan(row.text, policy, st))
        local found = phi_scan.found()
        out[#out + 1] = #found > 0 and cjson.encode(found) or "[]"
    end
    ngx.say(table.concat(out, "\n"))
end

local function same(m)
    return m[0]
end

local function pii_literal(m)
    return '"' .. pii.mask(m[0]:sub(2, -2)) .. '"'
end

local SCANNERS = {
    -- the floor: walking the body's string literals, as every scanner here does
    walk = function(body) return re_gsub(body, JSON_STRING, same, "jo") end,
    -- what mask_pii does today: four classes, no checksums
    mask_pii = function(body) return re_gsub(body, JSON_STRING, pii_literal, "jo") end,
}
local function phi_scanner(policy)
    local compiled = phi_scan.compile(policy)
    return function(body)
        local st = { policy = compiled, counts = {}, seen = {}, next = {} }
        return phi.scan_json(body, st)
    end
end
SCANNERS.phi_log = phi_scanner({ ["*"] = "log" })
SCANNERS.phi_mask = phi_scanner({ ["*"] = "mask" })
SCANNERS.phi_one = phi_scanner({ ssn = "mask" })

-- POST /cost?iter=N: microseconds of CPU per KiB for each scanner, as JSON
function _M.cost()
    ngx.req.read_body()
    local body = ngx.req.get_body_data()
    local iter = tonumber(ngx.var.arg_iter) or 200
    local kib = #body / 1024
    local res = {}
    for name, fn in pairs(SCANNERS) do
        for _ = 1, 20 do fn(body) end   -- warm: compiled patterns, JIT traces
        local t0 = clock()
        for _ = 1, iter do fn(body) end
        res[name] = (clock() - t0) / iter / kib * 1e6
    end
    ngx.say(cjson.encode(res))
end

return _M
