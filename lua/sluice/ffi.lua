-- The private lua-nginx-module / lua-resty-core FFI the data plane calls, in one
-- place, checked at start. These are not ngx.* API: a lua-resty-core or
-- lua-nginx-module upgrade may rename or drop any of them. init() (called by
-- phases.init, in init_by_lua) checks that each C symbol resolves, each C type is
-- declared with the fields read here, and each resty.core.base helper exists; a
-- missing one fails nginx's start with its name, instead of the first request.
--
-- The C declarations are lua-resty-core's own (resty.core.request, resty.core.var),
-- so their signatures follow the installed release. The calls go through `C`, the
-- ffi.C namespace kept as an upvalue (LuaJIT compiles `C.name(...)` to a direct
-- call; a C function cached in a local would be an indirect one), inside small Lua
-- functions that LuaJIT inlines into its traces: no cost above the calls themselves.
--
-- Used by sluice.headers (the header walk), sluice.observe ($sl_line) and
-- sluice.context (the request's address). libc's memcmp/memmem (headers, bytes) are
-- public and stay where they are used.
local ffi = require("ffi")
local base = require("resty.core.base")
require("resty.core.request")   -- declares ngx_http_lua_ffi_req_get_headers* and the elt type
require("resty.core.var")       -- declares ngx_http_lua_ffi_var_set

local C = ffi.C
local ffi_cast = ffi.cast
local ffi_string = ffi.string
local ffi_typeof = ffi.typeof
local ffi_offsetof = ffi.offsetof
local pcall = pcall
local pairs = pairs
local type = type
local concat = table.concat
local str_gsub = string.gsub
local error = error

-- Every private C symbol called below.
local SYMBOLS = { "ngx_http_lua_ffi_req_get_headers_count", "ngx_http_lua_ffi_req_get_headers",
                  "ngx_http_lua_ffi_var_set" }
-- Every private C type used below, with the fields read of it.
local TYPES = { ngx_http_lua_ffi_table_elt_t = { "key", "value" } }
-- Every resty.core.base helper used below (Lua functions, not symbols).
local HELPERS = { "get_request", "get_string_buf", "get_size_ptr" }

local ALL = 0     -- no limit on the headers listed (a negative count means 100)
local LOWER = 0   -- the names lower-cased, as nginx keeps them beside the originals
local ERR_BUF_SIZE = 256

local get_request = base.get_request
local get_string_buf = base.get_string_buf
local get_size_ptr = base.get_size_ptr

-- Made here only if the type is declared: a missing one is reported by check(),
-- by name, rather than by this module's require.
local ELTS, ELT_SIZE
do
    local ok, t = pcall(ffi_typeof, "ngx_http_lua_ffi_table_elt_t *")
    if ok then
        ELTS, ELT_SIZE = t, ffi.sizeof("ngx_http_lua_ffi_table_elt_t")
    end
end
local truncated = ffi.new("int[1]")

local _M = { SYMBOLS = SYMBOLS, TYPES = TYPES, HELPERS = HELPERS }

-- The current request's ngx_http_request_t * (nil outside a request's phases).
_M.get_request = get_request

-- The current request's headers as nginx lists them: `list`, an
-- ngx_http_lua_ffi_table_elt_t * of `n` entries ({key, value}, each {data, len};
-- names lower-cased), and `n`; nil, 0 when there are none. The list lives in the
-- worker's string buffer: read it before anything else uses that buffer.
function _M.req_headers()
    local r = get_request()
    local n = C.ngx_http_lua_ffi_req_get_headers_count(r, ALL, truncated)
    if n <= 0 then
        return nil, 0
    end
    local list = ffi_cast(ELTS, get_string_buf(n * ELT_SIZE))
    C.ngx_http_lua_ffi_req_get_headers(r, list, n, LOWER)
    return list, n
end

-- Sets the current request's variable `name` (lower-case, declared in nginx.conf)
-- to the `len` bytes at `value` (a pointer or a string): nginx copies them into the
-- request's pool, no Lua string is made. true, or nil and nginx's reason.
function _M.var_set(name, value, len)
    local name_len = #name
    local errlen = get_size_ptr()
    errlen[0] = ERR_BUF_SIZE
    local lowcase = get_string_buf(name_len + ERR_BUF_SIZE)
    local rc = C.ngx_http_lua_ffi_var_set(get_request(), name, name_len, lowcase, value, len,
                                          lowcase + name_len, errlen)
    if rc ~= 0 then
        return nil, ffi_string(lowcase + name_len, errlen[0])
    end
    return true
end

local function index_c(name)
    return C[name]
end

-- Is every symbol, type and helper above there? true, or nil and a message naming
-- each missing one. `extra_symbols` (optional): more C symbol names to check.
function _M.check(extra_symbols)
    local missing = {}
    local function symbol(name)
        local ok, err = pcall(index_c, name)
        if not ok then
            -- "missing declaration for symbol ...", "undefined symbol: ..."
            missing[#missing + 1] = "C symbol " .. name .. " (" .. str_gsub(err, "^.-:%d+: ", "") .. ")"
        end
    end
    for i = 1, #SYMBOLS do
        symbol(SYMBOLS[i])
    end
    if extra_symbols then
        for i = 1, #extra_symbols do
            symbol(extra_symbols[i])
        end
    end
    for name, fields in pairs(TYPES) do
        if not pcall(ffi_typeof, name) then
            missing[#missing + 1] = "C type " .. name .. " (not declared)"
        else
            for i = 1, #fields do
                if not ffi_offsetof(name, fields[i]) then
                    missing[#missing + 1] = "field " .. fields[i] .. " of C type " .. name
                end
            end
        end
    end
    for i = 1, #HELPERS do
        if type(base[HELPERS[i]]) ~= "function" then
            missing[#missing + 1] = "resty.core.base." .. HELPERS[i]
        end
    end
    if #missing > 0 then
        return nil, "missing private FFI: " .. concat(missing, "; ")
    end
    return true
end

-- init_by_lua: fails nginx's start, naming what is missing, unless check() passes.
function _M.init(extra_symbols)
    local ok, err = _M.check(extra_symbols)
    if not ok then
        error("sluice.ffi: " .. err .. " (lua-resty-core / lua-nginx-module changed?)", 2)
    end
end

return _M
