-- luacheck configuration: lua/ runs inside lua-nginx-module.
std = "ngx_lua"
max_line_length = 110
files["bench/*.lua"] = { globals = { "wrk", "request", "response", "done", "init", "setup" } }
