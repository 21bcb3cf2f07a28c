-- Unit tests of the data plane's pure Lua (no nginx, no ngx.*), run with plain luajit
-- from the repository root:  luajit tests/lua/run.lua
-- tests/unit/test_lua_units.py runs it under pytest. Tests of modules that need nginx
-- (ngx.*, lua-resty-core, shared dicts) live in tests/lua/nginx/ and run inside one
-- (tests/unit/test_lua_nginx_units.py). Each tests/lua/test_*.lua returns
-- a table of name -> function; a failed assert fails that test. Exit 1 on any failure.
package.path = "lua/?.lua;tests/lua/?.lua;" .. package.path
package.cpath = "/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;" .. package.cpath

local FILES = { "test_gcra", "test_swrr", "test_der", "test_scan", "test_same", "test_strict",
                "test_accesslog", "test_body", "test_nginx_time", "test_bytes", "test_multipart",
                "test_media", "test_strict_anthropic", "test_strict_responses", "test_gemini",
                "test_realtime_plans", "test_ws_frames", "test_json_prefix",
                "test_caller_path", "test_client_ip" }

local passed, failed = 0, 0
for _, file in ipairs(FILES) do
    local tests = require(file)
    local names = {}
    for name in pairs(tests) do
        names[#names + 1] = name
    end
    table.sort(names)
    for _, name in ipairs(names) do
        local ok, err = pcall(tests[name])
        if ok then
            passed = passed + 1
        else
            failed = failed + 1
            io.write("FAIL ", file, ".", name, ": ", tostring(err), "\n")
        end
    end
end
io.write(passed, " passed, ", failed, " failed\n")
os.exit(failed == 0 and 0 or 1)
