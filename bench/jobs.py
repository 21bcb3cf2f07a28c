"""Async jobs on this machine: jobs/s through one `sluice worker` and through two, and
how long the job flow takes to recover from a RabbitMQ outage.

Starts the whole stack as real processes (a private PostgreSQL and RabbitMQ, the
admin API, the controller, one gateway, one demo OpenAI backend answering at once).

- throughput: --n jobs are submitted (Prefer: respond-async) with no worker running,
  then 1 (and then 2) workers are started; the figure is jobs ended per second from
  the workers' start to the last job's end. Submissions/s is printed too.
- outage: one worker runs while a client submits a job every 50 ms; the broker is
  SIGKILLed, left down --outage-s seconds and started again. Printed: how long after
  the broker is back until every job accepted during the outage has ended, and until
  the first of them ended.

    .venv/bin/python bench/jobs.py [--n 300] [--outage-s 3]

Prints figures; never a CI gate.
"""
from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
from sqlalchemy import text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from control_plane.clients.admin import AdminClient  # noqa: E402
from control_plane.db import make_engine  # noqa: E402
from control_plane.runtime import migrate, postgres, procs  # noqa: E402
from control_plane.runtime.gateway import GatewayProcess as Gateway  # noqa: E402
from control_plane.runtime.nginx_conf import GatewayConfig  # noqa: E402
from control_plane.runtime.rabbitmq import Broker  # noqa: E402


class Bench:
    def __init__(self, top: Path):
        self.top = top
        self.children: dict[str, object] = {}
        self.cluster = postgres.Cluster(top / "pg")
        self.broker = Broker(top / "rabbitmq")
        self.api_port, gw_port, internal_port = procs.free_ports(3)
        self.token = secrets.token_urlsafe(24)
        self.admin_token = secrets.token_urlsafe(16)
        self.gateway = Gateway(GatewayConfig(
            prefix=top / "gw", port=gw_port, internal_port=internal_port, token=self.token,
            workers=1, jobs_url=f"http://127.0.0.1:{self.api_port}"))

    def env(self) -> dict:
        return dict(os.environ, DATABASE_URL=self.db_url, SLUICE_ADMIN_TOKEN=self.admin_token,
                    SLUICE_GATEWAY_TOKEN=self.token, SLUICE_API_PORT=str(self.api_port),
                    SLUICE_GATEWAYS=self.gateway.internal_url, SLUICE_AMQP_URL=self.broker.url,
                    SLUICE_WORKER_GATEWAY_URL=self.gateway.url,
                    SLUICE_CONTROLLER_INTERVAL="0.2", SLUICE_LOG_LEVEL="WARNING")

    def spawn(self, name: str, *args: str):
        proc = procs.spawn([sys.executable, "-m", "control_plane.cli", *args],
                           log=self.top / f"{name}.log", env=self.env(), cwd=REPO)
        self.children[name] = proc
        return proc

    def start(self) -> str:
        self.top.chmod(0o755)
        self.cluster.init()
        self.cluster.start()
        self.db_url = self.cluster.create_database("sluice")
        migrate.upgrade(self.db_url)
        self.engine = make_engine(self.db_url)
        self.broker.start()
        (self.top / "gw").mkdir()
        self.gateway.start()
        port = procs.free_port()
        self.children["backend"] = procs.spawn(
            [sys.executable, "-m", "control_plane.demo.backends", "--protocol", "openai",
             "--port", str(port), "--name", "fast"], log=self.top / "backend.log", cwd=REPO)
        procs.wait_http(f"http://127.0.0.1:{port}/health")
        api = self.spawn("api", "api", "--workers", "2")
        admin_url = f"http://127.0.0.1:{self.api_port}/api/v1"
        procs.wait_http(admin_url + "/config", proc=api, timeout=30)
        self.spawn("controller", "controller")
        admin = AdminClient(admin_url, self.admin_token)
        model = admin.create("models", name="chat-demo", timeout_ms=5000)
        admin.create("backends", name="fast", model_id=model["id"],
                     url=f"http://127.0.0.1:{port}", protocol="openai")
        consumer = admin.create("consumers", name="bench")
        key = admin.create("keys", consumer_id=consumer["id"], name="bench")["key"]
        version = admin.config_version()
        deadline = time.monotonic() + 30
        while self.gateway.served_version() < version:
            if time.monotonic() > deadline:
                raise TimeoutError("the gateway never got the snapshot")
            time.sleep(0.05)
        return key

    def stop(self) -> None:
        for proc in self.children.values():
            procs.stop(proc)
        self.gateway.stop()
        self.broker.stop()
        self.engine.dispose()
        self.cluster.stop()

    def ended(self, ids: list[str]) -> int:
        with self.engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM jobs WHERE id = ANY(:ids) AND "
                                     "status IN ('succeeded', 'failed')"),
                                {"ids": ids}).scalar_one()


def submit(session: requests.Session, gw: Gateway, key: str) -> str:
    r = session.post(gw.url + "/v1/chat/completions", timeout=10,
                     headers={"Authorization": f"Bearer {key}", "Prefer": "respond-async"},
                     json={"model": "chat-demo", "messages": [{"role": "user",
                                                               "content": "hi"}]})
    assert r.status_code == 202, r.text
    return r.json()["id"]


def throughput(b: Bench, key: str, n: int, workers: int) -> tuple[float, float]:
    s = requests.Session()
    t = time.perf_counter()
    ids = [submit(s, b.gateway, key) for _ in range(n)]
    submit_rate = n / (time.perf_counter() - t)
    t = time.perf_counter()
    names = [f"worker{i}" for i in range(workers)]
    for name in names:
        b.spawn(name, "worker")
    while b.ended(ids) < n:
        time.sleep(0.05)
    rate = n / (time.perf_counter() - t)
    for name in names:
        procs.stop(b.children.pop(name))
    return submit_rate, rate


def outage(b: Bench, key: str, outage_s: float) -> tuple[float, float, int]:
    b.spawn("worker-outage", "worker")
    s = requests.Session()
    during: list[str] = []
    down = threading.Event()
    stop = threading.Event()

    def client():
        while not stop.is_set():
            try:
                job = submit(s, b.gateway, key)
                if down.is_set():
                    during.append(job)
            except (AssertionError, requests.RequestException):
                pass
            time.sleep(0.05)

    th = threading.Thread(target=client, daemon=True)
    th.start()
    time.sleep(1.0)
    b.broker.kill()
    down.set()
    time.sleep(outage_s)
    down.clear()
    b.broker.start()
    back = time.perf_counter()
    stop.set()
    th.join(5)
    first = None
    while b.ended(during) < len(during):
        if first is None and b.ended(during) > 0:
            first = time.perf_counter() - back
        time.sleep(0.05)
    total = time.perf_counter() - back
    return first if first is not None else total, total, len(during)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--outage-s", type=float, default=3.0)
    args = ap.parse_args()
    top = Path(tempfile.mkdtemp(prefix="sluice-bench-jobs-"))
    b = Bench(top)
    try:
        key = b.start()
        sub1, one = throughput(b, key, args.n, 1)
        sub2, two = throughput(b, key, args.n, 2)
        first, total, count = outage(b, key, args.outage_s)
    finally:
        b.stop()
        shutil.rmtree(top, ignore_errors=True)
    print(f"submissions (202)            {min(sub1, sub2):8.1f} .. {max(sub1, sub2):.1f} /s")
    print(f"jobs through one worker      {one:8.1f} /s")
    print(f"jobs through two workers     {two:8.1f} /s   ({two / one:.2f}x)")
    print(f"broker outage {args.outage_s:g} s, {count} jobs accepted meanwhile: "
          f"first ended {first:.2f} s, all ended {total:.2f} s after the broker was back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
