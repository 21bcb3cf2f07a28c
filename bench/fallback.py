"""What a caller waits when a model times out and its fallback answers, on this machine.

Starts a Sluice gateway and two demo backends: `slow` (answers after --slow-ms) behind
model `precise` (timeout --timeout-ms, fallback_model `fast`) and a plain one behind
`fast`. Sends --n sequential chat requests to `precise` and to `fast` directly and
prints median and max latency of each, and the overhead of the fallback path over
`timeout + fast`.

    .venv/bin/python bench/fallback.py [--timeout-ms 1000] [--slow-ms 3000] [--n 20]

Prints figures; never a CI gate.
"""
from __future__ import annotations

import argparse
import hashlib
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from control_plane.demo.backends import serve  # noqa: E402
from control_plane.runtime import procs  # noqa: E402
from control_plane.runtime.gateway import GatewayProcess as Gateway  # noqa: E402
from control_plane.runtime.nginx_conf import GatewayConfig  # noqa: E402

KEY = "sk-bench-fallback-0123456789abcdef"


def backend(id_, server):
    return {"id": id_, "name": server.name, "protocol": "openai", "host": "127.0.0.1",
            "port": server.port, "weight": 100}


def timed(gw, model, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = requests.post(gw.url + "/v1/chat/completions", timeout=30,
                          headers={"Authorization": f"Bearer {KEY}"},
                          json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
        out.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200, r.text
        assert (model == "fast") or r.headers.get("X-Sluice-Fallback") == "fast"
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout-ms", type=int, default=1000)
    ap.add_argument("--slow-ms", type=int, default=3000)
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    slow = serve("openai", "127.0.0.1", 0, "slow", latency_ms=args.slow_ms)
    fast = serve("openai", "127.0.0.1", 0, "fast")
    prefix = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    prefix.chmod(0o755)
    port, internal = procs.free_ports(2)
    gw = Gateway(GatewayConfig(prefix=prefix, port=port, internal_port=internal,
                               token=secrets.token_urlsafe(24), workers=1))
    try:
        gw.start()
        snap = {"version": 1, "models": {
            "precise": {"name": "precise", "timeout_ms": args.timeout_ms,
                        "fallback_model": "fast", "backends": [backend(1, slow)]},
            "fast": {"name": "fast", "timeout_ms": 5000, "backends": [backend(2, fast)]}},
            "consumers": {"1": {"id": 1, "name": "bench", "allowed_models": None}},
            "keys": {hashlib.sha256(KEY.encode()).hexdigest(): {"id": 1, "consumer_id": 1}}}
        r = gw.push(snap)
        assert r.status_code == 200, r.text
        direct = timed(gw, "fast", args.n)
        fell = timed(gw, "precise", args.n)
        d, f = statistics.median(direct), statistics.median(fell)
        print(f"fast directly:      median {d:7.1f} ms  max {max(direct):7.1f} ms")
        print(f"precise -> fast:    median {f:7.1f} ms  max {max(fell):7.1f} ms "
              f"(timeout {args.timeout_ms} ms, slow backend {args.slow_ms} ms)")
        print(f"fallback overhead over timeout + fast: {f - args.timeout_ms - d:+.1f} ms")
    finally:
        gw.stop()
        slow.shutdown()
        fast.shutdown()
        shutil.rmtree(prefix, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
