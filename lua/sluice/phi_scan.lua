-- Finding personal and health data in text (classes: sluice.phi_classes) and masking
-- it, for sluice.phi. A compiled policy is the ordered list of classes it scans, each
-- with its action; a scan claims each byte for at most one class (the first in
-- phi_classes' order) and writes nothing to ngx.ctx: the request's `state` table
-- (placeholders given, counts) is passed in by sluice.phi, its one writer.
--
-- No string is made for text without a hit: ngx.re.find with the "jo" options over
-- the text, per class, and the checks read bytes. A hit of a masked class costs
-- its value's string (the key of the same-value-same-placeholder table).
local classes = require("sluice.phi_classes")

local ngx = ngx
local re_find = ngx.re.find
local str_sub = string.sub
local concat = table.concat
local sort = table.sort
local type = type
local pairs = pairs
local ipairs = ipairs
local tostring = tostring

local _M = {}

local ACTIONS = { mask = true, block = true, log = true }
_M.ACTIONS = ACTIONS

-- Returns nil or a message naming the first bad entry (sluice.validate).
function _M.validate(policy, where)
    if type(policy) ~= "table" then
        return where .. ": must be an object of class -> action"
    end
    for k, v in pairs(policy) do
        if k ~= "*" and not classes.BY_NAME[k] then
            return where .. "." .. tostring(k) .. ": unknown class"
        end
        if not ACTIONS[v] then
            return where .. "." .. tostring(k) .. ': must be "mask", "block" or "log"'
        end
    end
    return nil
end

-- The phi_policy of every model and consumer of snapshot `s` (absent or null: none).
function _M.validate_snapshot(s)
    for _, section in ipairs({ "models", "consumers" }) do
        for key, item in pairs(s[section]) do
            local p = type(item) == "table" and item.phi_policy
            if p and type(p) ~= "userdata" then   -- cjson.null: none
                local err = _M.validate(p, section .. "." .. tostring(key) .. ".phi_policy")
                if err then
                    return err
                end
            end
        end
    end
    return nil
end

-- A snapshot's `phi_policy` (nil or JSON null: none) -> the classes to scan, in
-- order, as { {class, action}, ... }; nil when it scans nothing.
function _M.compile(policy)
    if type(policy) ~= "table" then
        return nil
    end
    local default = policy["*"]
    local list = {}
    for _, c in ipairs(classes.CLASSES) do
        local action = policy[c.name] or default
        if ACTIONS[action] then
            list[#list + 1] = { class = c, action = action }
        end
    end
    return list[1] and list or nil
end

-- Scratch for one scan at a time (a scan never yields): hits as flat triples
-- (from, to, entry), the find's position, the pieces of a masked text.
local hits, n_hits = {}, 0
local at = { pos = 1 }
local order, pieces = {}, {}

local function taken(from, to)
    for i = 1, n_hits * 3, 3 do
        if from <= hits[i + 1] and to >= hits[i] then
            return true
        end
    end
    return false
end

-- The placeholder of this value of class `c` in this request: the same value gets
-- the same one ([PHONE_1], [PHONE_2], ...). Writes state.seen and state.next.
local function placeholder(state, c, value)
    local seen = state.seen
    local key = c.tag .. "\0" .. value
    local p = seen[key]
    if not p then
        local n = (state.next[c.tag] or 0) + 1
        state.next[c.tag] = n
        p = "[" .. c.tag .. "_" .. n .. "]"
        seen[key] = p
    end
    return p
end

local function by_start(a, b)
    return hits[a] < hits[b]
end

-- Scan `text` with compiled `policy`; count each hit in state.counts[class name].
-- Returns the text to send (masked, or `text` itself), the first blocked class (or
-- nil), and nil; or nil, nil, err when a pattern failed. `dry`: only find the hits
-- (nothing counted; apply() then sends a part of the text).
function _M.scan(text, policy, state, dry)
    n_hits = 0
    local masks = false
    for i = 1, #policy do
        local entry = policy[i]
        local c = entry.class
        local pattern, group, check = c.pattern, c.group, c.check
        at.pos = 1
        while true do
            local from, to, err = re_find(text, pattern, "jo", at, group)
            if not from then
                if err then
                    return nil, nil, "phi class " .. c.name .. ": " .. err
                end
                break
            end
            if to >= from and (not check or check(text, from, to)) and not taken(from, to) then
                local k = n_hits * 3
                hits[k + 1], hits[k + 2], hits[k + 3] = from, to, entry
                n_hits = n_hits + 1
                if not dry then
                    local counts = state.counts
                    counts[c.name] = (counts[c.name] or 0) + 1
                end
                masks = masks or entry.action == "mask"
            end
        end
    end
    if n_hits == 0 or dry then
        return text
    end
    local blocked
    for i = 3, n_hits * 3, 3 do
        local entry = hits[i]
        if entry.action == "block" then
            blocked = blocked or entry.class.name
        end
    end
    if not masks or blocked then
        return text, blocked
    end
    local n = 0
    for i = 1, n_hits do
        if hits[i * 3].action == "mask" then
            n = n + 1
            order[n] = i * 3 - 2
        end
    end
    for i = n + 1, #order do
        order[i] = nil
    end
    sort(order, by_start)
    local np, last = 0, 1
    for i = 1, n do
        local k = order[i]
        local from, to = hits[k], hits[k + 1]
        pieces[np + 1] = str_sub(text, last, from - 1)
        pieces[np + 2] = placeholder(state, hits[k + 2].class, str_sub(text, from, to))
        np = np + 2
        last = to + 1
    end
    pieces[np + 1] = str_sub(text, last)
    local out = concat(pieces, "", 1, np + 1)
    for i = 1, np + 1 do
        pieces[i] = nil
    end
    return out
end

-- After a dry scan of `text`: where the part text[lo..] must end so that no hit
-- straddles its end `hi` (the start of such a hit, less one; or hi).
function _M.cut(lo, hi)
    for i = 1, n_hits * 3, 3 do
        local from, to = hits[i], hits[i + 1]
        if from >= lo and from <= hi and to > hi and from - 1 < hi then
            hi = from - 1
        end
    end
    return hi
end

-- After a dry scan of `text`: text[lo..hi] to send, its hits (those starting at lo or
-- after) counted in state.counts and masked where the policy masks. Returns the part,
-- the first blocked class or nil.
function _M.apply(text, lo, hi, state)
    local np, last, blocked = 0, lo, nil
    local n = 0
    for i = 1, n_hits do
        local k = i * 3 - 2
        if hits[k] >= lo and hits[k + 1] <= hi then
            n = n + 1
            order[n] = k
        end
    end
    for i = n + 1, #order do
        order[i] = nil
    end
    sort(order, by_start)
    for i = 1, n do
        local k = order[i]
        local from, to, entry = hits[k], hits[k + 1], hits[k + 2]
        local name = entry.class.name
        state.counts[name] = (state.counts[name] or 0) + 1
        if entry.action == "block" then
            blocked = blocked or name
        elseif entry.action == "mask" then
            pieces[np + 1] = str_sub(text, last, from - 1)
            pieces[np + 2] = placeholder(state, entry.class, str_sub(text, from, to))
            np = np + 2
            last = to + 1
        end
    end
    pieces[np + 1] = str_sub(text, last, hi)
    local out = concat(pieces, "", 1, np + 1)
    for i = 1, np + 1 do
        pieces[i] = nil
    end
    return out, blocked
end

-- The last scan's hits as { {class name, from, to}, ... } (tests and bench/phi.py;
-- not the request path).
function _M.found()
    local out = {}
    for i = 1, n_hits do
        local k = i * 3 - 2
        out[i] = { hits[k + 2].class.name, hits[k], hits[k + 1] }
    end
    return out
end

return _M
