"""`sluice up`: the whole of Sluice on one machine, for a newcomer's first minutes.

Starts, in order: PostgreSQL (a private cluster under var/pg unless DATABASE_URL is
given), migrations to head, the admin UI's first user, RabbitMQ (a private node under
var/rabbitmq unless SLUICE_AMQP_URL is given), demo backends, the admin API (gunicorn),
demo data through the admin API, the gateway (nginx: HTTP, and HTTPS with a demo CA
made under var/tls), the controller and one `sluice worker` (async jobs, batches). The
gateway registers with the admin API and heartbeats like every member of a fleet (the
same runtime/membership.py that `sluice gateway` runs), so the admin UI shows its
version, boot id and last heartbeat. Prints how to call it, writes the same facts to
var/sluice-up.json (mode 0600), then supervises: a child that dies
(nginx and PostgreSQL included) is logged and started again with backoff
(runtime/supervisor.py), the others keep running. On SIGINT/SIGTERM it stops every
child it started.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from control_plane.clients.admin import AdminClient, AdminError
from control_plane.db import make_engine, make_sessionmaker
from control_plane.demo import fleet, media_fleet
from control_plane.runtime import certs, membership, migrate, postgres, procs, rabbitmq
from control_plane.runtime.gateway import GatewayProcess
from control_plane.runtime.gateway_config import GatewayConfig
from control_plane.runtime.supervisor import Backoff, Process, Supervisor
from control_plane.services import admin_users
from control_plane.settings import SettingsError, load_settings

REPO = Path(__file__).resolve().parents[2]

FIRST_ADMIN = "admin"


def var_dir() -> Path:
    return Path(os.environ.get("SLUICE_VAR_DIR", REPO / "var")).resolve()


def _port(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    try:
        port = int(raw)
    except ValueError:
        raise SystemExit(f"sluice up: {name}={raw!r} is not a port number")
    try:
        procs.wait_port(port, timeout=0.2)
    except TimeoutError:
        return port
    raise SystemExit(f"sluice up: port {port} is in use; set {name} to another port")


def _secrets(var: Path) -> dict:
    """Tokens kept across runs (var/secrets.json, 0600) unless the environment sets them."""
    path = var / "secrets.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    saved.setdefault("admin_token", secrets.token_urlsafe(24))
    saved.setdefault("gateway_token", secrets.token_urlsafe(24))
    saved.setdefault("secret_key", secrets.token_urlsafe(32))  # signs admin UI sessions
    saved.setdefault("admin_password", secrets.token_urlsafe(12))
    path.touch(mode=0o600)
    path.write_text(json.dumps(saved))
    return {
        "admin_token": os.environ.get("SLUICE_ADMIN_TOKEN", saved["admin_token"]),
        "gateway_token": os.environ.get("SLUICE_GATEWAY_TOKEN", saved["gateway_token"]),
        "secret_key": os.environ.get("SLUICE_SECRET_KEY", saved["secret_key"]),
        "admin_password": saved["admin_password"],
        **{key_name: saved.get(key_name) for _, _, key_name in fleet.DEMO_CONSUMERS.values()},
        "path": path,
    }


def _first_admin(db_url: str, password: str) -> str | None:
    """Create the UI's first admin user with the saved password; return the password
    when it still signs in (None once someone has changed it)."""
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as session:
            admin_users.ensure_user(session, FIRST_ADMIN, password, "admin")
            if admin_users.password_matches(session, FIRST_ADMIN, password):
                return password
            return None
    finally:
        engine.dispose()


def _gateway_settings() -> dict:
    """What the environment (through load_settings) sets for the gateway."""
    s = load_settings()
    return {"log_excerpts": s.log_excerpts, "redis_url": s.redis_url,
            "redis_failure": s.redis_failure, "cors_origins": s.cors_origins}


def _backoff() -> Backoff:
    s = load_settings()
    return Backoff(initial=s.restart_backoff, cap=s.restart_backoff_max,
                   reset_after=s.restart_reset_after)


@dataclass
class Stack:
    var: Path
    workers: int = 2
    supervisor: Supervisor = field(default_factory=Supervisor)
    cluster: postgres.Cluster | None = None
    broker: rabbitmq.Broker | None = None
    gateway: GatewayProcess | None = None
    member: membership.Membership | None = None

    def start(self) -> dict:
        self.var.mkdir(parents=True, exist_ok=True)
        self.var.chmod(0o755)  # the postgres user must reach var/pg when we are root
        logs = self.var / "logs"
        logs.mkdir(exist_ok=True)
        creds = _secrets(self.var)
        self.supervisor.backoff = _backoff()
        gw_port = _port("SLUICE_GATEWAY_PORT", 8000)
        tls_port = _port("SLUICE_GATEWAY_TLS_PORT", 8443)
        internal_port = _port("SLUICE_INTERNAL_PORT", 8001)
        api_port = _port("SLUICE_API_PORT", 8080)
        cp_metrics_port = _port("SLUICE_CONTROLLER_METRICS_PORT", 8002)

        db_url = os.environ.get("DATABASE_URL") or self._private_database()
        print("sluice up: migrating the database to head", flush=True)
        migrate.upgrade(db_url)
        admin_password = _first_admin(db_url, creds["admin_password"])
        amqp_url = os.environ.get("SLUICE_AMQP_URL") or self._private_broker()

        advertise_url = f"http://127.0.0.1:{internal_port}"
        env = dict(os.environ, DATABASE_URL=db_url,
                   SLUICE_ADMIN_TOKEN=creds["admin_token"],
                   SLUICE_GATEWAY_TOKEN=creds["gateway_token"],
                   SLUICE_SECRET_KEY=creds["secret_key"],
                   # the gateway registers itself there (runtime/membership.py)
                   SLUICE_CONTROL_PLANE_URL=f"http://127.0.0.1:{api_port}",
                   SLUICE_GATEWAY_ADVERTISE_URL=advertise_url,
                   SLUICE_API_HOST="127.0.0.1", SLUICE_API_PORT=str(api_port),
                   SLUICE_ACCESS_LOGS=f"gateway={self.var / 'gateway' / 'logs' / 'access.log'}",
                   SLUICE_CONTROLLER_METRICS_PORT=str(cp_metrics_port),
                   SLUICE_AMQP_URL=amqp_url,
                   SLUICE_JOBS_URL=f"http://127.0.0.1:{api_port}",
                   SLUICE_WORKER_GATEWAY_URL=f"http://127.0.0.1:{gw_port}")
        env.setdefault("SLUICE_MODEL_SLA", fleet.DEMO_SLAS)
        backend_urls = self._demo_backends(env, logs)

        api = self._spawn("api", [sys.executable, "-m", "control_plane.cli", "api"], env, logs)
        admin_url = f"http://127.0.0.1:{api_port}/api/v1"
        procs.wait_http(admin_url + "/config", proc=api.proc, timeout=30)
        admin = AdminClient(admin_url, creds["admin_token"])
        demo_keys = self._seed(admin, backend_urls, creds)
        _forget_listed(admin, advertise_url)

        # HTTPS beside HTTP: a private demo CA and a server certificate for
        # 127.0.0.1/localhost under var/tls, made once and reused by later runs.
        ca, tls_cert, tls_key = certs.ensure_demo(self.var / "tls", certs.DEMO_NAMES)
        self.gateway = GatewayProcess(GatewayConfig(prefix=self.var / "gateway", port=gw_port,
                                                    internal_port=internal_port,
                                                    tls_port=tls_port, tls_cert=tls_cert,
                                                    tls_key=tls_key,
                                                    token=creds["gateway_token"],
                                                    workers=self.workers,
                                                    jobs_url=f"http://127.0.0.1:{api_port}",
                                                    **_gateway_settings()))
        self.gateway.start()
        self.supervisor.add("gateway", self.gateway)
        # what `sluice gateway` does beside nginx: register, then heartbeat
        self.member = membership.from_settings(load_settings(env),
                                               lambda: self.gateway.usage()["boot"])
        self.member.start()
        self._spawn("controller", [sys.executable, "-m", "control_plane.cli", "controller"],
                    env, logs)
        self._spawn("worker", [sys.executable, "-m", "control_plane.cli", "worker"], env, logs)
        self._wait_served(admin.config_version())

        info = {
            "gateway_url": self.gateway.url,
            "gateway_tls_url": self.gateway.tls_url,
            "ca_cert": str(ca.cert),
            # Prometheus text format; needs Authorization: Bearer <gateway_token>
            "metrics_url": self.gateway.internal_url + "/metrics",
            "gateway_token": creds["gateway_token"],
            "controller_metrics_url": f"http://127.0.0.1:{cp_metrics_port}/metrics",
            "admin_url": admin_url,
            "admin_token": creds["admin_token"],
            "ui_url": f"http://127.0.0.1:{api_port}/admin",
            "admin_user": FIRST_ADMIN,
            "admin_password": admin_password,
            **demo_keys,
            "demo_models": [m["name"] for m in fleet.DEMO_MODELS],
            "demo_route": fleet.DEMO_ROUTE["name"],
            "demo_anthropic_model": fleet.DEMO_ANTHROPIC_MODEL,
            "demo_responses_model": "responses-demo",   # speaks the Responses API natively
            # GET /v1/realtime?model=<this> (a WebSocket; docs/realtime.md)
            "demo_realtime_model": fleet.DEMO_REALTIME_MODEL,
            **media_fleet.UP_KEYS,   # demo_asr_model, demo_tts_model, demo_image_model
            "database_url": db_url,
            "amqp_url": amqp_url,
            "logs": str(logs),
        }
        out = self.var / "sluice-up.json"
        out.touch(mode=0o600)
        out.chmod(0o600)
        out.write_text(json.dumps(info, indent=2))
        return info

    def _private_database(self) -> str:
        self.cluster = postgres.Cluster(self.var / "pg")
        print(f"sluice up: PostgreSQL under {self.cluster.datadir}", flush=True)
        self.cluster.init()
        try:
            self.cluster.start()
        except Exception:
            self.cluster.stop()
            raise
        self.supervisor.add("postgres", self.cluster)
        if not postgres.database_exists(self.cluster.url(), "sluice"):
            return self.cluster.create_database("sluice")
        return self.cluster.url("sluice")

    def _private_broker(self) -> str:
        self.broker = rabbitmq.Broker(self.var / "rabbitmq")
        print(f"sluice up: RabbitMQ under {self.broker.workdir}", flush=True)
        self.broker.start()
        self.supervisor.add("rabbitmq", self.broker)
        return self.broker.url

    def _spawn(self, name: str, args: list[str], env: dict, logs: Path) -> Process:
        child = Process(args, env=env, log=logs / f"{name}.log", cwd=REPO)
        child.start()
        self.supervisor.add(name, child)
        return child

    def _demo_backends(self, env: dict, logs: Path) -> dict[str, str]:
        """Start every demo backend, then wait for them all (they start in parallel)."""
        started = []
        ports = procs.free_ports(len(fleet.DEMO_BACKENDS))
        for backend, port in zip(fleet.DEMO_BACKENDS, ports):
            child = self._spawn(backend["name"], [
                sys.executable, "-m", fleet.backend_module(backend),
                *fleet.backend_args(backend, port)], env, logs)
            started.append((backend["name"], port, child))
        urls = {}
        for name, port, child in started:
            procs.wait_http(f"http://127.0.0.1:{port}/health", proc=child.proc)
            urls[name] = f"http://127.0.0.1:{port}"
        return urls

    def _seed(self, admin: AdminClient, backend_urls: dict, creds: dict) -> dict:
        """Demo data (control_plane/demo/fleet.py), idempotent: a second run updates
        ports and reuses the demo keys saved in var/secrets.json."""
        keys = fleet.seed(admin, backend_urls, creds)
        saved = json.loads(creds["path"].read_text())
        if any(saved.get(name) != key for name, key in keys.items()):
            saved.update(keys)
            creds["path"].write_text(json.dumps(saved))
        return keys

    def _wait_served(self, version: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.gateway.served_version() < version:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gateway did not get config version {version} in "
                                   f"{timeout}s: see {self.var / 'logs' / 'controller.log'}")
            self.check_children()
            time.sleep(0.1)

    def check_children(self) -> None:
        """While starting, a death is fatal (a port in use, a bad setting): say whose."""
        for name, how in self.supervisor.dead():
            raise RuntimeError(f"{name}: {how}")

    def supervise(self, stopping: threading.Event, interval: float = 0.5) -> None:
        """Restart whatever dies until `stopping` is set; reload the gateway when a
        pushed snapshot brings a backend CA it has no TLS location for."""
        while not stopping.wait(interval):
            self.supervisor.check()
            if self.gateway is not None and self.gateway.alive():
                self.gateway.sync_trust()

    def stop(self) -> None:
        """Every child, last started first: PostgreSQL goes last. The gateway says it
        leaves first, as `sluice gateway` does."""
        if self.member is not None:
            self.member.stop(leaving=True)
        self.supervisor.stop()


def _forget_listed(admin: AdminClient, internal_url: str) -> None:
    """A var/ from before `sluice up` registered its gateway lists it by URL (the
    controller's SLUICE_GATEWAYS row); such a row would refuse the registration at
    that URL, so it goes."""
    for gw in admin.list("gateways"):
        if not gw["registered"] and gw["internal_url"] == internal_url:
            admin.delete("gateways", gw["id"])


def _banner(info: dict) -> str:
    model = info["demo_models"][0]
    password = info["admin_password"] or "the password you set"
    return f"""
Sluice is up.
  gateway    {info['gateway_url']}
             {info['gateway_tls_url']}   (HTTP/2 too; demo CA: {info['ca_cert']})
  admin UI   {info['ui_url']}   (sign in as {info['admin_user']} / {password})
  admin API  {info['admin_url']}   (Authorization: Bearer {info['admin_token']})
  metrics    {info['metrics_url']}   (Authorization: Bearer <gateway_token>)
  demo key   {info['demo_api_key']}   (vip: {info['demo_vip_api_key']})
  models     {', '.join(info['demo_models'])}
  route      {info['demo_route']}: 90 % chat-demo, 10 % chat-canary, vip callers chat-canary
             (chat-slow times out after 1 s and is answered by its fallback chat-demo)
  logs       {info['logs']}
  (all of this is in var/sluice-up.json)

Try:
  curl -s {info['gateway_url']}/v1/chat/completions \\
    -H 'Authorization: Bearer {info['demo_api_key']}' -H 'Content-Type: application/json' \\
    -d '{{"model": "{model}", "messages": [{{"role": "user", "content": "hello"}}]}}'
  (try "model": "{info['demo_route']}" or "chat-slow" with curl -i, and see the
  X-Sluice-Route-Version or X-Sluice-Fallback header)

Anthropic's Messages API (any chat model; {info['demo_anthropic_model']} speaks it natively):
  curl -s {info['gateway_url']}/v1/messages -H 'x-api-key: {info['demo_api_key']}' \\
    -H 'Content-Type: application/json' -d '{{"model": "{info['demo_anthropic_model']}", "max_tokens": 100, "messages": [{{"role": "user", "content": "hello"}}]}}'

Async (202 and a job; GET the Location with the same key for the answer):
  curl -si {info['gateway_url']}/v1/chat/completions -H 'Prefer: respond-async' \
    -H 'Authorization: Bearer {info['demo_api_key']}' -H 'Content-Type: application/json' \
    -d '{{"model": "{model}", "messages": [{{"role": "user", "content": "hello"}}]}}'

Audio ({info['demo_asr_model']}: three ASR vendors, one answer; any WAV file):
  curl -s {info['gateway_url']}/v1/audio/transcriptions \\
    -H 'Authorization: Bearer {info['demo_api_key']}' \\
    -F model={info['demo_asr_model']} -F file=@call.wav -F response_format=srt

Over HTTPS, trusting the demo CA:
  curl -s --cacert {info['ca_cert']} {info['gateway_tls_url']}/v1/chat/completions \\
    -H 'Authorization: Bearer {info['demo_api_key']}' -H 'Content-Type: application/json' \\
    -d '{{"model": "{model}", "messages": [{{"role": "user", "content": "hello"}}]}}'

A part that dies is logged here and started again; Ctrl-C stops everything.
"""


def main(workers: int = 2) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stack = Stack(var_dir(), workers=workers)
    try:
        info = stack.start()
        print(_banner(info), flush=True)
        stack.supervise(stop)
        print("sluice up: stopping", flush=True)
        return 0
    except (RuntimeError, AdminError, TimeoutError, SettingsError) as exc:
        print(f"sluice up: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        stack.stop()
