"""Realtime (WebSocket) event round trip: what the gateway adds to one event there
and its answer back, against the demo realtime backend reached directly, and against
plain nginx proxying the same WebSocket natively (proxy_pass with Upgrade: bytes
passed, no event seen; the floor a proxy on this stack can reach).

One demo realtime backend (control_plane/demo/realtime.py), one session per target,
events sent one at a time: `conversation.item.create` with a text of `--size` bytes,
answered by `conversation.item.created` carrying the same text (so both directions
carry the size). Targets alternate, `--events` round trips each, after a warm-up.
Prints median and p99 per target and the gateway's added median; `--json` also writes
the figures. Never a pass/fail on time.

    .venv/bin/python bench/realtime.py --events 2000 --size 100
    .venv/bin/python bench/realtime.py --events 500 --size 65536
"""
from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from websockets.sync.client import connect  # noqa: E402

from bench.targets import LUA_MODULES, nginx_conf  # noqa: E402
from control_plane.runtime import procs  # noqa: E402
from control_plane.runtime.gateway import GatewayProcess as Gateway  # noqa: E402
from control_plane.runtime.nginx_conf import GatewayConfig  # noqa: E402

KEY = "sk-bench-realtime-0123456789abcdef"
MODEL = "rt-bench"


def plain_nginx_http(port: int, backend_port: int) -> str:
    return f"""
    map $http_upgrade $connection_upgrade {{ default upgrade; "" close; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_read_timeout 300s;
            proxy_pass http://127.0.0.1:{backend_port};
        }}
    }}"""


def start_plain_nginx(prefix: Path, port: int, backend_port: int):
    for d in ("logs", "tmp"):
        (prefix / d).mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    conf.write_text(nginx_conf(1, plain_nginx_http(port, backend_port), main=LUA_MODULES))
    proc = procs.spawn(["nginx", "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
                       log=prefix / "nginx.out")
    procs.wait_port(port)
    return proc


def snapshot(backend_port: int) -> dict:
    return {"version": 1, "generated_at": "2026-12-03T00:00:00Z",
            "models": {MODEL: {"id": 1, "name": MODEL, "timeout_ms": 300_000, "backends": [
                {"id": 1, "name": "rt-a", "protocol": "openai_realtime", "scheme": "http",
                 "host": "127.0.0.1", "port": backend_port,
                 "host_header": f"localhost:{backend_port}", "base_path": "",
                 "weight": 100}]}},
            "consumers": {"1": {"id": 1, "name": "bench", "allowed_models": None}},
            "keys": {hashlib.sha256(KEY.encode()).hexdigest(): {
                "id": 1, "consumer_id": 1, "prefix": KEY[:10], "expires_at": None}}}


def open_session(base: str):
    ws = connect(f"{base}/v1/realtime?model={MODEL}", max_size=None,
                 additional_headers={"Authorization": f"Bearer {KEY}"})
    assert json.loads(ws.recv())["type"] == "session.created"
    return ws


def round_trip(ws, event: str) -> float:
    t0 = time.perf_counter()
    ws.send(event)
    answer = ws.recv()
    took = time.perf_counter() - t0
    assert '"conversation.item.created"' in answer[:80], answer[:200]
    return took


def pct(values: list[float], p: float) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * p))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--size", type=int, default=100, help="bytes of text per event")
    ap.add_argument("--workers", type=int, default=1, help="gateway nginx workers")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    top = Path(tempfile.mkdtemp(prefix="sluice-bench-rt-"))
    top.chmod(0o755)
    backend_port, gw_port, internal_port, plain_port = procs.free_ports(4)
    backend = procs.spawn([sys.executable, "-m", "control_plane.demo.realtime", "--port",
                           str(backend_port), "--name", "rt-bench"], log=top / "backend.log",
                          cwd=REPO)
    gw = Gateway(GatewayConfig(prefix=top / "gw", port=gw_port, internal_port=internal_port,
                               token=secrets.token_urlsafe(24), workers=args.workers))
    plain = None
    sessions = []
    try:
        procs.wait_http(f"http://127.0.0.1:{backend_port}/health", proc=backend)
        (top / "gw").mkdir()
        (top / "gw").chmod(0o755)
        gw.start(log_to=top / "gw.out")
        r = gw.push(snapshot(backend_port))
        if r.status_code != 200:
            raise SystemExit(f"snapshot refused: {r.text}")
        plain = start_plain_nginx(top / "plain", plain_port, backend_port)
        targets = {"direct": f"ws://127.0.0.1:{backend_port}",
                   "plain nginx": f"ws://127.0.0.1:{plain_port}",
                   "sluice": gw.url.replace("http://", "ws://")}
        sessions = {name: open_session(base) for name, base in targets.items()}
        event = json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "x" * args.size}]}})
        for ws in sessions.values():        # warm-up: JIT, buffers
            for _ in range(200):
                round_trip(ws, event)
        times = {name: [] for name in sessions}
        for _ in range(args.events):
            for name, ws in sessions.items():
                times[name].append(round_trip(ws, event))
        figures = {name: {"median_us": statistics.median(t) * 1e6,
                          "p99_us": pct(t, 0.99) * 1e6} for name, t in times.items()}
        direct = figures["direct"]["median_us"]
        print(f"realtime event round trip, {args.events} events of {args.size} bytes "
              f"each way, one session per target")
        print(f"{'target':<12} {'median us':>10} {'p99 us':>10} {'added us':>10}")
        for name, f in figures.items():
            f["added_median_us"] = f["median_us"] - direct
            print(f"{name:<12} {f['median_us']:>10.0f} {f['p99_us']:>10.0f} "
                  f"{f['added_median_us']:>10.0f}")
        if args.json:
            Path(args.json).write_text(json.dumps({"events": args.events, "size": args.size,
                                                   "targets": figures}, indent=2))
    finally:
        for ws in (sessions.values() if isinstance(sessions, dict) else []):
            ws.close()
        gw.stop()
        if plain is not None:
            procs.stop(plain)
        procs.stop(backend)
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
