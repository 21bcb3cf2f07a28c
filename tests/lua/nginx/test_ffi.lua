-- sluice.ffi: every private symbol it calls resolves in this nginx, a missing one
-- fails the check by name, and its calls do what headers.lua and observe.lua need.
local ffi = require("ffi")
local sluice_ffi = require("sluice.ffi")

local T = {}

function T.every_symbol_type_and_helper_is_there()
    local ok, err = sluice_ffi.check()
    assert(ok == true and err == nil, tostring(err))
    assert(#sluice_ffi.SYMBOLS >= 3)
    for _, name in ipairs(sluice_ffi.SYMBOLS) do
        assert(type(ffi.C[name]) == "cdata", name)
    end
    for name in pairs(sluice_ffi.TYPES) do
        assert(ffi.sizeof(name) > 0, name)
    end
end

function T.a_missing_symbol_fails_the_check_by_name()
    local ok, err = sluice_ffi.check({ "ngx_http_lua_ffi_sluice_made_up" })
    assert(ok == nil, "check passed")
    assert(err:find("missing private FFI", 1, true), err)
    assert(err:find("C symbol ngx_http_lua_ffi_sluice_made_up", 1, true), err)
    -- the real ones are not reported with it
    assert(not err:find("ngx_http_lua_ffi_var_set", 1, true), err)
end

function T.init_raises_with_the_missing_name()
    local ok, err = pcall(sluice_ffi.init, { "ngx_http_lua_ffi_sluice_made_up" })
    assert(not ok)
    assert(tostring(err):find("ngx_http_lua_ffi_sluice_made_up", 1, true), err)
    assert(pcall(sluice_ffi.init))
end

function T.a_missing_field_or_helper_fails_the_check()
    local fields = sluice_ffi.TYPES.ngx_http_lua_ffi_table_elt_t
    fields[#fields + 1] = "no_such_field"
    local ok, err = sluice_ffi.check()
    fields[#fields] = nil
    assert(ok == nil and err:find("field no_such_field of C type ngx_http_lua_ffi_table_elt_t",
                                  1, true), tostring(err))

    local helpers = sluice_ffi.HELPERS
    helpers[#helpers + 1] = "no_such_helper"
    ok, err = sluice_ffi.check()
    helpers[#helpers] = nil
    assert(ok == nil and err:find("resty.core.base.no_such_helper", 1, true), tostring(err))
    assert(sluice_ffi.check())
end

function T.req_headers_lists_this_requests_headers_lower_cased()
    local list, n = sluice_ffi.req_headers()
    assert(n >= 1, n)
    local seen = {}
    for i = 0, n - 1 do
        local h = list[i]
        seen[ffi.string(h.key.data, h.key.len)] = ffi.string(h.value.data, h.value.len)
    end
    -- the same as ngx.req.get_headers, which the same calls serve
    local want = ngx.req.get_headers()
    for name, value in pairs(want) do
        if type(value) == "string" then
            assert(seen[name] == value, name .. ": " .. tostring(seen[name]))
        end
    end
    assert(seen.host, "no host header")
end

function T.var_set_writes_a_variable_from_bytes()
    local ok, err = sluice_ffi.var_set("sl_test", "hello, var", 5)
    assert(ok == true, err)
    assert(ngx.var.sl_test == "hello", ngx.var.sl_test)
    local buf = require("string.buffer").new():put("from a buffer")
    local ptr, len = buf:ref()
    assert(sluice_ffi.var_set("sl_test", ptr, len))
    assert(ngx.var.sl_test == "from a buffer", ngx.var.sl_test)
end

function T.var_set_reports_an_unknown_variable()
    local ok, err = sluice_ffi.var_set("sl_no_such_variable", "x", 1)
    assert(ok == nil, "set an undeclared variable")
    assert(type(err) == "string" and err:find("not found", 1, true), tostring(err))
end

function T.get_request_is_this_request()
    local r = sluice_ffi.get_request()
    assert(r ~= nil and type(r) == "cdata")
    assert(sluice_ffi.get_request() == r)
end

return T
