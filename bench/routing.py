"""Cost of the routing decision and of the controller's weight step, on this machine.

1. In nginx: the gateway's own config plus one bench-only server whose location runs
   bench/routing_loop.lua, which makes the access phase's routing decision (pool
   lookup + weighted pick over controller weights x breaker health + probe check)
   in a loop and times it. Pools of 10, 100 and 1,000 backends, with a weight table
   pushed and some circuits open. Nothing is proxied: this is the decision alone.
   Then the route-version choice (sluice.splits.pick) of a canary route with one
   condition, sticky, over 10,000 consumers.
2. The controller's weight step for 10,000 backends (100 pools of 100): formula over
   synthetic telemetry and stats (weights.compute), JSON encoding, and the push to a
   real gateway's POST /internal/weights.

    .venv/bin/python bench/routing.py [--iters 200000]

Prints figures; never a CI gate. See bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import random
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from control_plane.runtime import procs  # noqa: E402
from control_plane.runtime.gateway import GatewayProcess as Gateway  # noqa: E402
from control_plane.runtime.nginx_conf import GatewayConfig, render  # noqa: E402
from control_plane.services.weights import (Coefficients, OutcomeWindow, compute,  # noqa: E402
                                            pools_of)

LOOP = REPO / "bench" / "routing_loop.lua"


class BenchGateway(Gateway):
    """The real gateway config plus a bench-only server on `bench_port`."""

    def __init__(self, cfg: GatewayConfig, bench_port: int):
        super().__init__(cfg)
        self.bench_port = bench_port

    def write_config(self) -> Path:
        path = super().write_config()
        text = render(self.cfg)
        block = (f"    server {{\n        listen 127.0.0.1:{self.bench_port};\n"
                 f"        location / {{ content_by_lua_file {LOOP}; }}\n    }}\n}}\n")
        path.write_text(text.rstrip().rstrip("}") + block)
        return path


def snapshot(sizes: list[int]) -> dict:
    models, bid = {}, 0
    for n in sizes:
        backends = []
        for i in range(n):
            bid += 1
            backends.append({"id": bid, "name": f"b{bid}", "protocol": "openai",
                             "scheme": "http", "host": "127.0.0.1", "port": 20000 + i,
                             "host_header": "x", "base_path": "", "weight": 100})
        models[f"pool-{n}"] = {"id": len(models) + 1, "name": f"pool-{n}",
                               "timeout_ms": 1000, "backends": backends}
    # a canary route over two of the pools: vips (half of the bench's callers) to the
    # canary at 50 %, everyone else 95 / 5
    routes = {"canary": {"sticky": True, "versions": [
        {"model": f"pool-{sizes[1]}", "percent": 50,
         "conditions": [{"attr": "user_type", "op": "eq", "value": "vip"}]},
        {"model": f"pool-{sizes[0]}", "percent": 95},
        {"model": f"pool-{sizes[1]}", "percent": 5}]}}
    return {"version": 1, "models": models, "consumers": {}, "keys": {},
            "breaker": {"min_requests": 1000}, "routes": routes}


def bench_routing(gw: BenchGateway, sizes: list[int], iters: int) -> list[dict]:
    snap = snapshot(sizes)
    r = gw.push(snap)
    r.raise_for_status()
    rnd = random.Random(1)
    weights = {str(b["id"]): rnd.randint(100, 1000)
               for m in snap["models"].values() for b in m["backends"]}
    gw.push_weights({"version": 1, "weights": weights, "hold_s": 3600}).raise_for_status()
    rows = []
    for n in sizes:
        r = requests.get(f"http://127.0.0.1:{gw.bench_port}/",
                         params={"model": f"pool-{n}", "iters": iters}, timeout=600)
        r.raise_for_status()
        out = r.json()
        rows.append({"backends": n, "iters": out["iters"],
                     "us_per_decision": round(out["us_per_decision"], 3),
                     "distinct_picked": len(out["picks"])})
    r = requests.get(f"http://127.0.0.1:{gw.bench_port}/",
                     params={"route": "canary", "iters": iters, "consumers": 10000},
                     timeout=600)
    r.raise_for_status()
    out = r.json()
    rows.append({"route": "canary", "iters": out["iters"],
                 "us_per_decision": round(out["us_per_decision"], 3),
                 "picks": out["picks"]})
    return rows


def bench_controller(gw: Gateway, n_pools: int = 100, per_pool: int = 100) -> dict:
    rnd = random.Random(2)
    models, free, window, latencies, bid = {}, {}, OutcomeWindow(), {}, 0
    for p in range(n_pools):
        backends = []
        for _ in range(per_pool):
            bid += 1
            backends.append({"id": bid, "name": f"b{bid}", "protocol": "openai",
                             "weight": 100})
            free[f"b{bid}"] = rnd.random()
            window.update("gw", str(bid), rnd.randint(50, 100), rnd.randint(0, 5), now=0)
            latencies[str(bid)] = [rnd.uniform(20, 400) for _ in range(5)]
        models[f"m{p}"] = {"backends": backends}
    t0 = time.perf_counter()
    pools = pools_of({"models": models})
    table = compute(pools, {}, Coefficients(), free, window, latencies, now=1)
    t1 = time.perf_counter()
    body = json.dumps({"version": 2, "weights": table, "hold_s": 3600})
    t2 = time.perf_counter()
    r = requests.post(gw.internal_url + "/internal/weights", data=body,
                      headers={"Authorization": f"Bearer {gw.cfg.token}",
                               "Content-Type": "application/json"}, timeout=30)
    r.raise_for_status()
    t3 = time.perf_counter()
    return {"backends": len(table), "compute_ms": round((t1 - t0) * 1000, 1),
            "encode_ms": round((t2 - t1) * 1000, 1), "push_ms": round((t3 - t2) * 1000, 1),
            "body_kib": round(len(body) / 1024, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=200_000)
    args = ap.parse_args()
    top = Path(tempfile.mkdtemp(prefix="sluice-bench-routing-"))
    top.chmod(0o755)
    port, internal, bench_port = procs.free_ports(3)
    gw = BenchGateway(GatewayConfig(prefix=top, port=port, internal_port=internal,
                                    token=secrets.token_urlsafe(24), workers=1),
                      bench_port)
    try:
        gw.start()
        rows = bench_routing(gw, [10, 100, 1000], args.iters)
        print("routing decision (route + weighted pick + breaker check), 1 worker:")
        for row in rows[:-1]:
            print(f"  {row['backends']:>5} backends: {row['us_per_decision']:8.3f} us/decision"
                  f"  ({row['iters']} iterations, {row['distinct_picked']} backends picked)")
        route = rows[-1]
        print(f"route-version choice (1 condition + sticky 95/5 split), 10,000 consumers: "
              f"{route['us_per_decision']:.3f} us/decision  (picks {route['picks']})")
        ctl = bench_controller(gw)
        print(f"controller weight step, {ctl['backends']} backends in 100 pools: "
              f"compute {ctl['compute_ms']} ms, JSON {ctl['encode_ms']} ms, "
              f"push {ctl['push_ms']} ms ({ctl['body_kib']} KiB)")
        print(json.dumps({"routing": rows, "controller": ctl}))
    finally:
        gw.stop()
        shutil.rmtree(top, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
