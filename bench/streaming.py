"""Streaming through Sluice against calling the backend directly: time to first
byte (TTFB) and per-chunk overhead.

Two pairs, each on real demo backends (control_plane/demo) on 127.0.0.1:

- passthrough: OpenAI chat stream (SSE) from an `openai` backend, directly and
  through the gateway (bytes pass unchanged);
- converted: Triton `generate_stream` SSE from a `kserve_v2` backend, directly, and
  an OpenAI chat stream through the gateway that converts frame by frame.

Each request streams the same answer of `--words` words, one SSE event each, the
backend pausing `--chunk-delay-ms` between events (so each travels on its own).
Requests run one at a time, alternating direct and gateway, `--requests` times each.
TTFB: median time to the first body byte. Per-chunk overhead: median arrival time of
the last event through the gateway minus directly (both since the request was sent).
Chunks are paced by the backend, so the gateway's cost does not pile up: this is the
delay it adds to each chunk (TTFB's share included).
Prints a table; `--json` also writes the figures. Never a pass/fail on time.

    .venv/bin/python bench/streaming.py --requests 100 --words 50 --chunk-delay-ms 2
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
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

from control_plane.runtime import procs  # noqa: E402
from control_plane.runtime.gateway import GatewayProcess as Gateway  # noqa: E402
from control_plane.runtime.nginx_conf import GatewayConfig  # noqa: E402

KEY = "sk-bench-streaming-0123456789abcdef"


def start_backend(protocol: str, log_dir: Path):
    port = procs.free_port()
    proc = procs.spawn([sys.executable, "-m", "control_plane.demo.backends", "--protocol",
                        protocol, "--port", str(port), "--name", protocol],
                       log=log_dir / f"{protocol}.log", cwd=REPO)
    procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
    return port, proc


def timed_stream(port: int, path: str, body: dict, headers: dict) -> tuple[float, list]:
    """(seconds to the first body byte, arrival second of each data event)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    conn.request("POST", path, body=data,
                 headers={"Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"{path}: status {resp.status}: {resp.read()[:300]!r}")
    t_first, arrivals = None, []
    while True:
        more = resp.read1(65536)
        now = time.perf_counter() - t0
        if not more:
            break
        if t_first is None:
            t_first = now
        arrivals += [now] * more.count(b"data: ")
    conn.close()
    return t_first, arrivals


def run_pair(name, direct, via, requests_n):
    """direct / via: callables returning timed_stream's tuple."""
    for _ in range(5):       # warm-up: connections, JIT, worker caches
        direct()
        via()
    d, g = [], []
    for _ in range(requests_n):
        d.append(direct())
        g.append(via())
    ttfb_d = statistics.median(x[0] for x in d) * 1000
    ttfb_g = statistics.median(x[0] for x in g) * 1000
    last_d = statistics.median(x[1][-1] for x in d) * 1000
    last_g = statistics.median(x[1][-1] for x in g) * 1000
    return {"pair": name, "ttfb_direct_ms": round(ttfb_d, 3),
            "ttfb_gateway_ms": round(ttfb_g, 3), "ttfb_added_ms": round(ttfb_g - ttfb_d, 3),
            "last_direct_ms": round(last_d, 3), "last_gateway_ms": round(last_g, 3),
            "events": len(g[0][1]), "per_chunk_added_ms": round(last_g - last_d, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--words", type=int, default=50)
    ap.add_argument("--chunk-delay-ms", type=float, default=2)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    top = Path(tempfile.mkdtemp(prefix="sluice-bench-stream-"))
    top.chmod(0o755)
    started, gw = [], None
    try:
        oa_port, oa = start_backend("openai", top)
        v2_port, v2 = start_backend("kserve_v2", top)
        started += [oa, v2]
        port, internal = procs.free_ports(2)
        gw = Gateway(GatewayConfig(prefix=top / "gw", port=port, internal_port=internal,
                                   token=secrets.token_urlsafe(24), workers=args.workers))
        gw.start(log_to=top / "nginx.out")

        def backend(i, name, p, protocol):
            return {"id": i, "name": name, "protocol": protocol, "scheme": "http",
                    "host": "127.0.0.1", "port": p, "host_header": f"127.0.0.1:{p}",
                    "base_path": "", "weight": 100}
        snap = {"version": 1, "generated_at": "2026-11-29T00:00:00Z",
                "models": {"llm": {"id": 1, "name": "llm", "timeout_ms": 30000,
                                   "backends": [backend(1, "oa", oa_port, "openai")]},
                           "v2": {"id": 2, "name": "v2", "timeout_ms": 30000,
                                  "backends": [backend(2, "v2", v2_port, "kserve_v2")]}},
                "consumers": {"1": {"id": 1, "name": "bench", "allowed_models": None}},
                "keys": {hashlib.sha256(KEY.encode()).hexdigest():
                         {"id": 1, "consumer_id": 1, "prefix": KEY[:10], "expires_at": None}}}
        r = gw.push(snap)
        if r.status_code != 200:
            raise SystemExit(f"snapshot refused: {r.text}")

        text = " ".join(f"w{i}" for i in range(args.words - 1))   # + "echo:" / "v2:"
        chat = {"model": "llm", "stream": True, "messages": [{"role": "user", "content": text}]}
        pace = {"X-Demo-Chunk-Delay-Ms": str(args.chunk_delay_ms)}
        auth = {"Authorization": f"Bearer {KEY}", **pace}
        results = [
            run_pair("passthrough (openai SSE)",
                     lambda: timed_stream(oa_port, "/v1/chat/completions", chat, pace),
                     lambda: timed_stream(port, "/v1/chat/completions", chat, auth),
                     args.requests),
            run_pair("converted (kserve_v2 generate_stream -> OpenAI SSE)",
                     lambda: timed_stream(v2_port, "/v2/models/v2/generate_stream",
                                          {"text_input": text}, pace),
                     lambda: timed_stream(port, "/v1/chat/completions",
                                          {**chat, "model": "v2"}, auth),
                     args.requests),
        ]
    finally:
        if gw is not None:
            gw.stop()
        for p in started:
            procs.stop(p)
        shutil.rmtree(top, ignore_errors=True)

    print(f"{args.requests} requests per target, {args.words}-word answers, "
          f"{args.chunk_delay_ms} ms between chunks, {args.workers} worker(s); medians")
    cols = ("ttfb_direct_ms", "ttfb_gateway_ms", "ttfb_added_ms", "last_direct_ms",
            "last_gateway_ms", "events", "per_chunk_added_ms")
    print("| pair | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for r in results:
        print(f"| {r['pair']} | " + " | ".join(str(r[c]) for c in cols) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
