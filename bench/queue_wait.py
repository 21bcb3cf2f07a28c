"""What the gateway's queue adds: how long after a slot is given back does the
request that waited for it get its answer, beyond what the same request costs when
it does not wait.

Starts a demo backend (control_plane.demo.backends, openai) with max_in_flight 1 and
the Sluice gateway (--workers 1, then 2), and per trial:

  1. a held request (X-Demo-Hold) takes the only slot;
  2. a second request (plan: standard, queue_timeout_ms 10000) joins the queue
     (the script waits until /internal/stats shows it);
  3. the hold is released: the held answer ends, its log phase hands the slot over,
     the waiter goes to the backend and answers.

gap = (waiter's answer) - (held answer), both seen by this client: the hand-off of
the slot plus the waiter's own trip to the backend and back (its request was in the
gateway already), so an upper bound of what the queue adds. `plain` is the whole
latency of the same request, new connection included, with the pool idle: the
scale to read the gap against.
With 2 workers the trial is labelled by whether both requests were in one worker
(the releasing worker posts the waiter's semaphore) or in two (the waiter's worker
sees the grant at its next poll, every 5 ms) — each request opens its own connection,
so the kernel spreads them; the worker is read from the X-Request-Id the gateway
made (its first 16 hex digits are per worker).

    .venv/bin/python bench/queue_wait.py [--trials 100] [--workers 1 2]

Figures go to stdout; never a CI gate. See bench/README.md.
"""
from __future__ import annotations

import argparse
import hashlib
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from control_plane.runtime import procs  # noqa: E402
from control_plane.runtime.gateway import GatewayProcess as Gateway  # noqa: E402
from control_plane.runtime.nginx_conf import GatewayConfig  # noqa: E402

KEY = "sk-bench-queue-0123456789abcdef"
BODY = {"model": "bench-chat", "messages": [{"role": "user", "content": "hi"}]}


def snapshot(port: int) -> dict:
    backend = {"id": 1, "name": "demo", "protocol": "openai", "scheme": "http",
               "host": "127.0.0.1", "port": port, "host_header": f"localhost:{port}",
               "base_path": "", "weight": 100, "max_in_flight": 1}
    return {"version": 1, "generated_at": "2026-12-01T00:00:00Z",
            "models": {"bench-chat": {"id": 1, "name": "bench-chat", "timeout_ms": 60000,
                                      "backends": [backend]}},
            "consumers": {"1": {"id": 1, "name": "bench", "allowed_models": None,
                                "plan_id": 1}},
            "keys": {hashlib.sha256(KEY.encode()).hexdigest(): {
                "id": 1, "consumer_id": 1, "prefix": KEY[:10], "expires_at": None}},
            "plans": {"1": {"id": 1, "name": "standard", "priority": "standard",
                            "rate_per_second": 100000,
                            "queue_timeout_ms": 10000}}}


def post(gw: Gateway, headers: dict | None = None) -> requests.Response:
    r = requests.post(gw.url + "/v1/chat/completions", json=BODY, timeout=30,
                      headers={"Authorization": f"Bearer {KEY}", **(headers or {})})
    r.raise_for_status()
    return r


def until(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("bench: timed out waiting for the gateway")
        time.sleep(0.001)


def trial(gw: Gateway, backend_url: str) -> tuple[float, bool]:
    token = secrets.token_hex(8)
    done: dict[str, tuple[float, str]] = {}

    def send(name, headers=None):
        r = post(gw, headers)
        done[name] = (time.perf_counter(), r.headers["X-Request-Id"])

    held = threading.Thread(target=send, args=("held", {"X-Demo-Hold": token}))
    held.start()
    until(lambda: gw.stats()["backends"]["1"]["in_flight"] == 1)
    waiter = threading.Thread(target=send, args=("waiter",))
    waiter.start()
    until(lambda: gw.stats()["queues"]["bench-chat"]["standard"] == 1)
    requests.post(f"{backend_url}/demo/release/{token}", timeout=5)
    held.join(30)
    waiter.join(30)
    (t_held, id_held), (t_wait, id_wait) = done["held"], done["waiter"]
    return t_wait - t_held, id_held[:16] == id_wait[:16]


def summary(label: str, values: list[float]) -> str:
    if not values:
        return f"{label:<28} {'-':>6}"
    ms = sorted(v * 1000 for v in values)
    p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
    return (f"{label:<28} {len(ms):>6} {statistics.median(ms):>9.2f} {p90:>9.2f} "
            f"{ms[-1]:>9.2f}")


def run(workers: int, trials: int, top: Path) -> None:
    port = procs.free_port()
    backend = procs.spawn([sys.executable, "-m", "control_plane.demo.backends",
                           "--protocol", "openai", "--port", str(port), "--name", "demo"],
                          log=top / f"backend-{workers}.log", cwd=REPO)
    prefix = top / f"gw-{workers}"
    prefix.mkdir()
    prefix.chmod(0o755)
    gport, iport = procs.free_ports(2)
    gw = Gateway(GatewayConfig(prefix=prefix, port=gport, internal_port=iport,
                               token=secrets.token_urlsafe(24), workers=workers,
                               error_log_level="warn"))
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/health", proc=backend)
        gw.start(log_to=prefix / "nginx.out")
        r = gw.push(snapshot(port))
        r.raise_for_status()
        backend_url = f"http://127.0.0.1:{port}"
        plain = []
        for _ in range(trials):
            t0 = time.perf_counter()
            post(gw)
            plain.append(time.perf_counter() - t0)
        same, cross = [], []
        for _ in range(trials):
            gap, one_worker = trial(gw, backend_url)
            (same if one_worker else cross).append(gap)
        print(f"# {workers} worker(s), {trials} trials; ms")
        print(f"{'':<28} {'n':>6} {'median':>9} {'p90':>9} {'max':>9}")
        print(summary("plain (pool idle)", plain))
        print(summary("gap, one worker", same))
        print(summary("gap, two workers", cross))
    finally:
        gw.stop()
        procs.stop(backend)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    top = Path(tempfile.mkdtemp(prefix="sluice-bench-queue-"))
    top.chmod(0o755)
    try:
        for workers in args.workers:
            run(workers, args.trials, top)
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
