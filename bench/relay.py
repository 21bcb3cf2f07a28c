"""What the relay (lua/sluice/relay.lua) costs: a converted whole answer fetched
through the subrequest, against the same pair sent straight from location /.

Starts one upstream (plain nginx answering a KServe v1 `predict` with a fixed body)
and two one-worker gateways on it, serving an OpenAI chat model whose backend speaks
`predict`, so every answer is converted whole:

  relay    this checkout's lua/, as shipped
  direct   a copy of it whose relay.wanted() answers false: the path before the relay
           (the status goes out before the conversion; an unconvertible 200 would
           reach the caller as an error body under 200)

wrk (bench/chat.lua) drives each in turn, --rounds times, alternating; prints req/s,
p50, p99 and the worker's CPU per request (utime + stime from /proc, the steadier
figure on a shared machine), their medians and the ratios relay / direct.

    .venv/bin/python bench/relay.py [--duration 5] [--rounds 3] [--connections 16]

Prints figures; never a CI gate.
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from bench.gateway import start_nginx  # noqa: E402
from bench.wrk import MODEL, BenchError, run_wrk  # noqa: E402
from control_plane.runtime.gateway import GatewayProcess as Gateway  # noqa: E402
from control_plane.runtime.nginx_conf import GatewayConfig  # noqa: E402
from control_plane.runtime.procs import free_ports, stop  # noqa: E402

KEY = "sk-bench-relay-0123456789abcdef"
ANSWER = '{"predictions":["Hello, bench!"]}'
# the one line that sends a converted whole answer through the relay
WANTED = "    return ctx.conv ~= nil and http_version() < 2\n"


def upstream_http(port: int) -> str:
    return f"""
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location ~ ^/v1/models/[^/]+/predict$ {{
            default_type application/json;
            return 200 '{ANSWER}';
        }}
        location / {{ return 404 '{{"error":"not found"}}'; }}
    }}"""


def direct_lua(dest: Path) -> Path:
    """A copy of lua/ whose relay.wanted() is false."""
    shutil.copytree(REPO / "lua", dest)
    relay = dest / "sluice" / "relay.lua"
    text = relay.read_text()
    if text.count(WANTED) != 1:
        raise BenchError("relay.wanted() changed: update bench/relay.py's WANTED")
    relay.write_text(text.replace(WANTED, "    return false\n"))
    dest.chmod(0o755)
    return dest


def snapshot(upstream_port: int) -> dict:
    return {
        "version": 1,
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "models": {MODEL: {
            "id": 1, "name": MODEL, "timeout_ms": 60000,
            "backends": [{"id": 1, "name": "bench-predict", "protocol": "predict",
                          "scheme": "http", "host": "127.0.0.1", "port": upstream_port,
                          "host_header": f"127.0.0.1:{upstream_port}", "base_path": "",
                          "weight": 100}],
        }},
        "consumers": {"1": {"id": 1, "name": "bench", "allowed_models": None}},
        "keys": {hashlib.sha256(KEY.encode()).hexdigest():
                 {"id": 1, "consumer_id": 1, "prefix": KEY[:11], "expires_at": None}},
    }


def start_gateway(prefix: Path, lua_root: Path, upstream_port: int) -> Gateway:
    port, internal_port = free_ports(2)
    gw = Gateway(GatewayConfig(prefix=prefix, port=port, internal_port=internal_port,
                               token="bench-relay-token-0123456789", workers=1,
                               lua_root=lua_root))
    gw.start()
    r = gw.push(snapshot(upstream_port))
    if r.status_code != 200:
        gw.stop()
        raise BenchError(f"snapshot push answered {r.status_code}: {r.text}")
    return gw


def check(name: str, gw: Gateway) -> None:
    r = requests.post(gw.url + "/v1/chat/completions", timeout=5,
                      headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    if r.status_code != 200 or r.json()["choices"][0]["message"]["content"] != "Hello, bench!":
        raise BenchError(f"{name} answered {r.status_code}: {r.text[:300]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()

    top = Path(tempfile.mkdtemp(prefix="sluice-relay-"))
    top.chmod(0o755)
    up_port, = free_ports(1)
    upstream = start_nginx(top / "upstream", 1, upstream_http(up_port), up_port)
    gateways: dict[str, Gateway] = {}
    try:
        gateways["relay"] = start_gateway(top / "relay", REPO / "lua", up_port)
        gateways["direct"] = start_gateway(top / "direct", direct_lua(top / "lua-direct"),
                                           up_port)
        runs: dict[str, list[dict]] = {name: [] for name in gateways}
        for name, gw in gateways.items():
            check(name, gw)
            run_wrk(gw.url, KEY, 2, args.connections, 1)   # warm-up
        for i in range(args.rounds):
            for name, gw in gateways.items():
                fig = run_wrk(gw.url, KEY, args.duration, args.connections, 1,
                              master_pid=gw.proc.pid)
                if fig["non_2xx"] or fig["socket_errors"]:
                    raise BenchError(f"{name}: non-2xx or socket errors: "
                                     f"{fig['non_2xx']}, {fig['socket_errors']}")
                runs[name].append(fig)
                print(f"round {i + 1} {name:6s} {fig['rps']:8.0f} req/s  "
                      f"p50 {fig['p50_ms']:6.2f} ms  p99 {fig['p99_ms']:6.2f} ms  "
                      f"{fig['cpu_us']:7.1f} us CPU/request")
        med = {name: {k: statistics.median(f[k] for f in figs)
                      for k in ("rps", "p50_ms", "p99_ms", "cpu_us")}
               for name, figs in runs.items()}
        print()
        for name, m in med.items():
            print(f"median {name:6s} {m['rps']:8.0f} req/s  p50 {m['p50_ms']:6.2f} ms  "
                  f"p99 {m['p99_ms']:6.2f} ms  {m['cpu_us']:7.1f} us CPU/request")
        r, d = med["relay"], med["direct"]
        print(f"relay / direct: req/s x{r['rps'] / d['rps']:.2f}, "
              f"CPU/request x{r['cpu_us'] / d['cpu_us']:.2f} "
              f"(+{r['cpu_us'] - d['cpu_us']:.1f} us), p50 x{r['p50_ms'] / d['p50_ms']:.2f}")
        return 0
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        for gw in gateways.values():
            gw.stop()
        stop(upstream)
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
