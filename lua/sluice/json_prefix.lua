-- Whether text that arrives in pieces can still become one JSON object: the streamed
-- check of a tool call's arguments (adapters/stream.lua). A piece after which the
-- text is no longer the start of a JSON object is caught before it reaches the
-- caller, so a client that parses partial JSON as it reads (the `anthropic` SDK
-- does) gets the stream's error event, not a parse error of its own. Whether the
-- object is complete is checked where the call's arguments end (cjson decodes them).
--
--   local state = json_prefix.new()
--   json_prefix.feed(state, piece)   -- true while the text so far may become an object
--
-- Pure Lua, one small table per call; strings are skipped with one find() each.
local byte = string.byte
local find = string.find

-- lexical states
local START, VALUE, FIRST_ITEM, FIRST_KEY, KEY, COLON, STR, ESC, HEX, NUM, LIT, AFTER, DONE
    = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13

local OPEN_OBJ, CLOSE_OBJ, OPEN_ARR, CLOSE_ARR = 123, 125, 91, 93   -- { } [ ]
local QUOTE, BACKSLASH, COMMA, COLON_CH, MINUS, DOT = 34, 92, 44, 58, 45, 46
local WS = { [32] = true, [9] = true, [10] = true, [13] = true }
local ESCAPES = { [34] = true, [92] = true, [47] = true, [98] = true, [102] = true,
                  [110] = true, [114] = true, [116] = true }
local LITERALS = { [116] = "true", [102] = "false", [110] = "null" }
-- what ends a string's plain run: a quote, a backslash or a control character
local STRING_STOP = '[%z\001-\031"\\]'

local _M = {}

function _M.new()
    return { st = START, stack = {}, depth = 0, key = false, num = 0, lit = nil, li = 0,
             hex = 0 }
end

local function digit(c)
    return c >= 48 and c <= 57
end

local function hex_digit(c)
    return digit(c) or (c >= 97 and c <= 102) or (c >= 65 and c <= 70)
end

-- A value starts with `c` (state VALUE or FIRST_ITEM); false when none can.
local function value(s, c)
    if c == OPEN_OBJ or c == OPEN_ARR then
        s.depth = s.depth + 1
        s.stack[s.depth] = c
        s.st = c == OPEN_OBJ and FIRST_KEY or FIRST_ITEM
    elseif c == QUOTE then
        s.st, s.key = STR, false
    elseif c == MINUS then
        s.st, s.num = NUM, 1
    elseif digit(c) then
        s.st, s.num = NUM, c == 48 and 2 or 3
    elseif LITERALS[c] then
        s.st, s.lit, s.li = LIT, LITERALS[c], 2
    else
        return false
    end
    return true
end

-- `c` after a value: a comma, or the bracket that closes the open container.
local function after(s, c)
    if WS[c] then
        return true
    end
    local top = s.stack[s.depth]
    if c == COMMA then
        s.st = top == OPEN_OBJ and KEY or VALUE
        return true
    end
    if (c == CLOSE_OBJ and top == OPEN_OBJ) or (c == CLOSE_ARR and top == OPEN_ARR) then
        s.stack[s.depth] = nil
        s.depth = s.depth - 1
        s.st = s.depth == 0 and DONE or AFTER
        return true
    end
    return false
end

-- Number sub-states (s.num): 1 after '-', 2 a leading 0, 3 integer digits, 4 after
-- '.', 5 fraction digits, 6 after e/E, 7 after the exponent's sign, 8 its digits.
local NUMBER_ENDS = { [2] = true, [3] = true, [5] = true, [8] = true }

local function number(s, c)
    local n = s.num
    if digit(c) then
        if n == 1 then s.num = c == 48 and 2 or 3
        elseif n == 2 then return false
        elseif n == 4 then s.num = 5
        elseif n == 6 or n == 7 then s.num = 8
        end
        return true
    end
    if c == DOT and (n == 2 or n == 3) then
        s.num = 4
        return true
    end
    if (c == 101 or c == 69) and NUMBER_ENDS[n] and n ~= 8 then   -- e, E
        s.num = 6
        return true
    end
    if (c == 43 or c == MINUS) and n == 6 then
        s.num = 7
        return true
    end
    if not NUMBER_ENDS[n] then
        return false
    end
    s.st = AFTER   -- the number ended: `c` is what follows it
    return after(s, c)
end

-- Feed the next piece of the text. Returns true while the text so far is the start
-- of a JSON object (or one whole, with only whitespace after it); false from the
-- first piece that breaks it on (the state stays broken).
function _M.feed(s, piece)
    if s.broken then
        return false
    end
    local i, n = 1, #piece
    while i <= n do
        local st = s.st
        if st == STR then
            local j = find(piece, STRING_STOP, i)
            if not j then
                return true   -- the string goes on in the next piece
            end
            local c = byte(piece, j)
            i = j
            if c == BACKSLASH then
                s.st = ESC
            elseif c == QUOTE then
                s.st = s.key and COLON or AFTER
            else
                s.broken = true   -- a control character inside a string
                return false
            end
        else
            local c = byte(piece, i)
            local ok = true
            if st == ESC then
                if c == 117 then   -- \uXXXX
                    s.st, s.hex = HEX, 4
                else
                    ok = ESCAPES[c] ~= nil
                    s.st = STR
                end
            elseif st == HEX then
                ok = hex_digit(c)
                s.hex = s.hex - 1
                if s.hex == 0 then s.st = STR end
            elseif WS[c] and st ~= NUM and st ~= LIT then
                ok = true
            elseif st == START then
                ok = c == OPEN_OBJ and value(s, c)
            elseif st == VALUE then
                ok = value(s, c)
            elseif st == FIRST_ITEM then
                if c == CLOSE_ARR then
                    ok = after(s, c)
                else
                    ok = value(s, c)
                end
            elseif st == FIRST_KEY or st == KEY then
                if c == QUOTE then
                    s.st, s.key = STR, true
                else
                    ok = st == FIRST_KEY and c == CLOSE_OBJ and after(s, c)
                end
            elseif st == COLON then
                ok = c == COLON_CH
                s.st = VALUE
            elseif st == NUM then
                ok = number(s, c)
            elseif st == LIT then
                ok = byte(s.lit, s.li) == c
                s.li = s.li + 1
                if s.li > #s.lit then s.st = AFTER end
            elseif st == AFTER then
                ok = after(s, c)
            else   -- DONE: only whitespace may follow
                ok = false
            end
            if not ok then
                s.broken = true
                return false
            end
        end
        i = i + 1
    end
    return true
end

return _M
