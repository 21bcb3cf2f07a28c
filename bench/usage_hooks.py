"""Cost of the usage counters' hot-path hooks (lua/sluice/usage.lua), in microseconds
per call, measured inside a real nginx worker (no network, no other Lua):

  count   usage.count(): the access-phase hook (worker-local key cache + one
          shared-dict incr with init and TTL), steady state;
  incr    a bare shared-dict incr, for scale;
  decode  what reading `usage` from a small chat answer costs when the consumer has no
          token quota (tokens.lua: find "usage", cjson-decode the 263-byte answer of
          bench/gateway.py's upstream).

    .venv/bin/python bench/usage_hooks.py [--calls 1000000]

Prints one line per repetition. Never a CI gate.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from control_plane.runtime.procs import free_port, spawn, stop, wait_port  # noqa: E402
from bench.gateway import UPSTREAM_ANSWER  # noqa: E402

LUA = r"""
local usage = require("sluice.usage")
local cjson = require("cjson.safe")
local N = tonumber(ngx.var.arg_n)
local consumer, endpoint = { key_id = "1" }, { kind = "chat" }
local body = ngx.var.http_x_body
local dict = ngx.shared.sluice_usage
local t0 = os.clock()
for _ = 1, N do usage.count({}, endpoint, consumer, "bench-chat") end
local t1 = os.clock()
for _ = 1, N do dict:incr("x", 1, 0, 100) end
local t2 = os.clock()
local M = N / 10
for _ = 1, M do
    if string.find(body, '"usage"', 1, true) then cjson.decode(body) end
end
local t3 = os.clock()
ngx.say(string.format('{"count": %.3f, "incr": %.3f, "decode": %.3f}',
    (t1 - t0) / N * 1e6, (t2 - t1) / N * 1e6, (t3 - t2) / M * 1e6))
"""


def conf(port: int) -> str:
    user = "user root;" if os.geteuid() == 0 else ""
    dicts = "\n".join(f"    lua_shared_dict {d} 16m;" for d in (
        "sluice_usage", "sluice_limits", "sluice_metrics", "sluice_config", "sluice_stats",
        "sluice_breaker", "sluice_weights", "sluice_cache"))
    return f"""load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
{user}
worker_processes 1;
pid logs/nginx.pid;
error_log logs/error.log warn;
events {{ worker_connections 64; }}
http {{
    lua_package_path "{REPO}/lua/?.lua;/usr/share/lua/5.1/?.lua;;";
{dicts}
    client_body_temp_path tmp/cb;
    proxy_temp_path tmp/p;
    fastcgi_temp_path tmp/f;
    uwsgi_temp_path tmp/u;
    scgi_temp_path tmp/s;
    init_by_lua_block {{ require("sluice.usage").init() }}
    server {{
        listen 127.0.0.1:{port};
        location / {{ content_by_lua_file {{prefix}}/bench.lua; }}
    }}
}}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    prefix = Path(tempfile.mkdtemp(prefix="sluice-usage-bench-"))
    prefix.chmod(0o755)
    try:
        for sub in ("conf", "logs", "tmp"):
            (prefix / sub).mkdir()
        (prefix / "bench.lua").write_text(LUA)
        port = free_port()
        (prefix / "conf" / "nginx.conf").write_text(
            conf(port).replace("{prefix}", str(prefix)))
        proc = spawn(["nginx", "-p", f"{prefix}/", "-c", "conf/nginx.conf",
                      "-g", "daemon off;"], log=prefix / "logs" / "stdout.log")
        try:
            wait_port(port, timeout=10)
            body = json.dumps(UPSTREAM_ANSWER, separators=(",", ":"))
            for _ in range(args.repeat):
                r = requests.get(f"http://127.0.0.1:{port}/", params={"n": args.calls},
                                 headers={"X-Body": body}, timeout=120)
                r.raise_for_status()
                print("us per call:", r.text.strip())
        finally:
            stop(proc)
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
