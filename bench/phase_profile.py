"""Where a Sluice request's Lua time goes, per phase handler and per access step.

Copies lua/ to a temporary folder and puts a timing wrapper in front of
sluice/phases.lua (the product's own file is untouched): every entry point (access,
balancer, header_filter, body_filter, log) and the steps phases.lua calls through
module tables (auth.authenticate, target.model_name, ...) are timed with the
monotonic clock (FFI clock_gettime, vDSO: tens of ns per reading; the wrapper's own
cost per timed call is measured and subtracted). Then starts the upstream and one
1-worker gateway of bench/gateway.py from that copy, warms up, resets the counters,
runs wrk, and prints µs per request for each, with the worker's total CPU per request
(/proc) for scale: what is not in a handler is nginx itself (HTTP parsing, proxying,
the access log).

    .venv/bin/python bench/phase_profile.py [--target sluice|policy] [--duration 8]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import requests  # noqa: E402

from bench import gateway as bench  # noqa: E402
from bench.wrk import run_wrk, worker_cpu_seconds  # noqa: E402
from control_plane.runtime.procs import free_ports, stop  # noqa: E402

# Entry points of sluice.phases, and the steps it calls through module tables.
STEPS = {
    "sluice.endpoints": ["match"],
    "sluice.config": ["get"],
    "sluice.auth": ["authenticate", "allowed"],
    "sluice.target": ["model_name", "pool"],
    "sluice.policy": ["check", "headers", "body_filter", "release"],
    "sluice.limits": ["enter", "take_all"],
    "sluice.tokens": ["body_filter", "reconcile"],
    "sluice.usage": ["count", "log"],
    "sluice.content": ["check"],
    "sluice.splits": ["choose", "header"],
    "sluice.cache": ["lookup", "header_filter", "body_filter"],
    "sluice.admission": ["admit", "attempt", "release"],
    "sluice.balancer": ["choose", "balance", "log"],
    "sluice.pii": ["forward"],
    "sluice.fallback": ["arm", "header_filter"],
    "sluice.convert": ["prepare", "header_filter", "body_filter"],
    "sluice.observe": ["log"],
    "sluice.context": ["stash", "finish"],
}
PHASES = ["access", "balancer", "header_filter", "body_filter", "log"]

WRAPPER = r'''
-- bench/phase_profile.py: times sluice.phases' entry points and steps (not the product)
local ffi = require("ffi")
local inner = require("sluice.phases_inner")
pcall(ffi.cdef, [[
typedef struct { long tv_sec; long tv_nsec; } sluice_prof_ts;
int clock_gettime(int clk, sluice_prof_ts *tp);
]])
local C = ffi.C
local ts = ffi.new("sluice_prof_ts")
local function now()
    C.clock_gettime(1, ts)   -- CLOCK_MONOTONIC (vDSO)
    return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3
end
local acc, calls = {}, {}
local function wrap(name, f)
    acc[name], calls[name] = 0, 0
    return function(...)
        local t0 = now()
        local a, b, c, d, e = f(...)
        acc[name] = acc[name] + now() - t0
        calls[name] = calls[name] + 1
        return a, b, c, d, e
    end
end
local STEPS = %s
for mod, fns in pairs(STEPS) do
    local ok, m = pcall(require, mod)   -- an older tree (--lua) may lack a module
    for _, fn in ipairs(ok and fns or {}) do
        if m[fn] then m[fn] = wrap(mod:gsub("^sluice%%.", "") .. "." .. fn, m[fn]) end
    end
end
local M = {}
for k, v in pairs(inner) do M[k] = v end
for _, p in ipairs(%s) do M[p] = wrap("phase." .. p, inner[p]) end
local empty = wrap("overhead", function() end)
function M.internal()
    local uri = ngx.var.uri
    if uri == "/prof/reset" then
        for k in pairs(acc) do acc[k], calls[k] = 0, 0 end
        for _ = 1, 100000 do empty() end
        ngx.say("ok")
        return ngx.exit(200)
    elseif uri == "/prof" then
        ngx.say(require("cjson").encode({ acc = acc, calls = calls }))
        return ngx.exit(200)
    end
    return inner.internal()
end
return M
'''


def lua_list(items) -> str:
    return "{" + ", ".join(f'"{i}"' for i in items) + "}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=("sluice", "policy"), default="sluice")
    parser.add_argument("--duration", type=float, default=8)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--lua", type=Path, default=REPO / "lua",
                        help="the Lua tree to profile (default: this checkout's)")
    args = parser.parse_args()

    top = Path(tempfile.mkdtemp(prefix="sluice-prof-"))
    top.chmod(0o755)
    lua = top / "lua"
    shutil.copytree(args.lua, lua)
    (lua / "sluice" / "phases.lua").rename(lua / "sluice" / "phases_inner.lua")
    steps = "{" + ", ".join(f'["{m}"] = {lua_list(f)}' for m, f in STEPS.items()) + "}"
    (lua / "sluice" / "phases.lua").write_text(WRAPPER % (steps, lua_list(PHASES)))
    for p in top.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)

    up_port, = free_ports(1)
    upstream = bench.start_nginx(top / "upstream", 1, bench.upstream_http(up_port), up_port)
    key, policy_key = "sk-bench-0123456789abcdef", "sk-bench-policy-0123456789ab"
    gw = None
    try:
        from control_plane.runtime import nginx_conf
        real_init = nginx_conf.GatewayConfig.__init__

        def with_root(self, *a, **kw):
            kw.setdefault("lua_root", lua)
            real_init(self, *a, **kw)
        nginx_conf.GatewayConfig.__init__ = with_root
        gw = bench.start_gateway(top / "gateway", 1, up_port, key, policy_key)
        k = key if args.target == "sluice" else policy_key
        try:
            bench.check_answers(args.target, gw.url, k)
        except bench.BenchError:
            print(gw.error_log.read_text(errors="replace")[-3000:], file=sys.stderr)
            raise
        bench.run_wrk(gw.url, k, 2, args.connections, 1)
        auth = {"Authorization": f"Bearer {gw.cfg.token}"}
        requests.get(gw.internal_url + "/prof/reset", headers=auth, timeout=30)
        cpu0 = worker_cpu_seconds(gw.proc.pid)
        fig = run_wrk(gw.url, k, args.duration, args.connections, 1)
        cpu = (worker_cpu_seconds(gw.proc.pid) - cpu0) / fig["requests"] * 1e6
        prof = requests.get(gw.internal_url + "/prof", headers=auth, timeout=30).json()
    finally:
        if gw is not None:
            gw.stop()
        stop(upstream)
        shutil.rmtree(top, ignore_errors=True)

    n = fig["requests"]
    over = prof["acc"]["overhead"] / max(1, prof["calls"]["overhead"])
    print(f"# {args.target}: {n} requests, {fig['rps']:.0f} req/s, worker CPU "
          f"{cpu:.1f} us/request; timer overhead {over:.3f} us per timed call "
          "(subtracted)")

    def per_req(name):
        c = prof["calls"].get(name, 0)
        return (prof["acc"].get(name, 0) - over * c) / n, c / n

    rows = []
    total_lua = 0.0
    for p in PHASES:
        us, calls = per_req("phase." + p)
        total_lua += us
        rows.append(("phase." + p, us, calls))
    for name in sorted(prof["acc"]):
        if not name.startswith(("phase.", "overhead")) and prof["calls"][name]:
            rows.append((name, *per_req(name)))
    print(f"{'handler / step':<26} {'us/request':>10} {'calls/request':>14}")
    for name, us, calls in rows:
        print(f"{name:<26} {us:>10.2f} {calls:>14.2f}")
    print(f"{'Lua handlers, total':<26} {total_lua:>10.2f}")
    print(f"{'nginx itself (CPU - Lua)':<26} {cpu - total_lua:>10.2f}")
    print(json.dumps({"cpu_us": cpu, "lua_us": total_lua, "rps": fig["rps"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
