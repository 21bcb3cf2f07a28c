"""Command line of the demo backends: ``python -m control_plane.demo.backends`` (or
``sluice demo-backend``) runs one in the foreground."""
from __future__ import annotations

import argparse

from control_plane.demo.backends import PROTOCOLS, DemoServer
from control_plane.demo.metrics import FORMATS, DemoMetrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m control_plane.demo.backends",
                                     description="Run one demo model backend.")
    parser.add_argument("--protocol", choices=PROTOCOLS, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--name", help="reported in X-Demo-Backend (default: "
                                       "<protocol>-<port>)")
    parser.add_argument("--latency-ms", type=float, default=0,
                        help="sleep before each inference answer")
    parser.add_argument("--chunk-delay-ms", type=float, default=0,
                        help="sleep between SSE chunks")
    parser.add_argument("--failure-rate", type=float, default=0.0,
                        help="fraction of inference requests answered 500")
    parser.add_argument("--loading-seconds", type=float, default=0,
                        help="report the model loading (503) for this long after start")
    parser.add_argument("--seed", type=int, help="seed for --failure-rate")
    parser.add_argument("--access-log", action="store_true",
                        help="log each request to stderr")
    parser.add_argument("--metrics", choices=FORMATS,
                        help="serve GET /metrics as this model server would")
    parser.add_argument("--metrics-used", type=float, default=0.0,
                        help="KV-cache (vllm) or GPU memory (triton, dcgm) in use, 0..1")
    parser.add_argument("--metrics-waiting", type=int, default=0,
                        help="requests waiting (vllm)")
    args = parser.parse_args(argv)
    name = args.name or f"{args.protocol}-{args.port}"
    server = DemoServer((args.host, args.port), args.protocol, name,
                        latency_ms=args.latency_ms, failure_rate=args.failure_rate,
                        chunk_delay_ms=args.chunk_delay_ms, seed=args.seed,
                        access_log=args.access_log, loading_s=args.loading_seconds)
    if args.metrics:
        server.metrics = DemoMetrics(args.metrics, name, used=args.metrics_used,
                                     waiting=args.metrics_waiting)
    print(f"demo backend {name} ({args.protocol}) on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
