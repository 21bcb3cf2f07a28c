"""The whole of Sluice, as real processes: Postgres, admin API under gunicorn,
controller, nginx gateway and demo backends, on free loopback ports."""
from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from control_plane.runtime import procs
from control_plane.clients.admin import AdminClient
from control_plane.runtime.gateway import GatewayProcess as Gateway
from control_plane.runtime.nginx_conf import GatewayConfig
from jobs_harness import Receiver, job_env, start_worker

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Stack:
    """Handles on the running parts, plus helpers a test needs to drive them."""

    tmp: Path
    db_url: str
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    gateway_token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    agent_token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    api_port: int = field(default_factory=procs.free_port)
    gateways: list = field(default_factory=list)
    children: dict = field(default_factory=dict)
    # more environment for every child (async jobs: SLUICE_AMQP_URL, ...)
    extra_env: dict = field(default_factory=dict)

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}/api/v1"

    @property
    def admin(self) -> AdminClient:
        return AdminClient(self.admin_url, self.admin_token)

    @property
    def gateway(self) -> Gateway:
        return self.gateways[0]

    @property
    def config_file(self) -> Path:
        return self.tmp / "sluice.env"

    def env(self) -> dict:
        return dict(os.environ, DATABASE_URL=self.db_url, SLUICE_CONFIG=str(self.config_file),
                    SLUICE_ADMIN_TOKEN=self.admin_token,
                    SLUICE_GATEWAY_TOKEN=self.gateway_token, SLUICE_SECRET_KEY=self.secret_key,
                    SLUICE_AGENT_TOKEN=self.agent_token,
                    SLUICE_API_PORT=str(self.api_port), SLUICE_CONTROLLER_INTERVAL="0.2",
                    **self.extra_env)

    def write_config(self, gateways: list[Gateway]) -> None:
        """The controller's SLUICE_CONFIG file: which gateways to push to."""
        urls = ",".join(g.internal_url for g in gateways)
        self.config_file.write_text(f"SLUICE_GATEWAYS={urls}\n")

    def spawn(self, name: str, args: list[str]):
        proc = procs.spawn(args, log=self.tmp / f"{name}.log", env=self.env(), cwd=REPO)
        self.children[name] = proc
        return proc

    def start_api(self):
        proc = self.spawn("api", [sys.executable, "-m", "control_plane.cli", "api",
                                  "--workers", "1"])
        procs.wait_http(self.admin_url + "/config", proc=proc, timeout=30)
        return proc

    def start_controller(self):
        return self.spawn("controller", [sys.executable, "-m", "control_plane.cli",
                                         "controller"])

    def stop(self, name: str) -> None:
        procs.stop(self.children.pop(name, None))

    def new_gateway(self, name: str) -> Gateway:
        port, internal_port = procs.free_ports(2)
        gw = Gateway(GatewayConfig(prefix=self.tmp / name, port=port,
                                   internal_port=internal_port,
                                   token=self.gateway_token, workers=2,
                                   jobs_url=f"http://127.0.0.1:{self.api_port}"))
        gw.start()
        self.gateways.append(gw)
        return gw

    def start_backend(self, name: str, protocol: str = "openai", **opts) -> str:
        port = procs.free_port()
        args = [sys.executable, "-m", "control_plane.demo.backends", "--protocol", protocol,
                "--port", str(port), "--name", name]
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        proc = self.spawn(f"backend-{name}", args)
        procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
        return f"http://127.0.0.1:{port}"

    def wait_served(self, gateway: Gateway | None = None, version: int | None = None,
                    timeout: float = 15.0) -> int:
        """Wait until `gateway` serves `version` (default: the control plane's current)."""
        gateway = gateway or self.gateway
        version = version if version is not None else self.admin.config_version()
        deadline = time.monotonic() + timeout
        while (served := gateway.served_version()) < version:
            if time.monotonic() > deadline:
                log = (self.tmp / "controller.log")
                raise AssertionError(f"gateway serves {served}, wanted {version}\n"
                                     + (log.read_text()[-3000:] if log.exists() else ""))
            time.sleep(0.05)
        return served

    def wait_weights(self, ids: list[int], expected: list[int],
                     gateway: Gateway | None = None, timeout: float = 20.0) -> float:
        """Wait until `gateway` uses weights `expected` for backends `ids`; the seconds
        it took."""
        gateway = gateway or self.gateway
        start = time.monotonic()
        while True:
            w = gateway.weights_status()["weights"]
            if [w.get(str(i)) for i in ids] == expected:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise AssertionError(f"gateway weights {w}, wanted {expected}")
            time.sleep(0.05)

    def chat(self, key: str, model: str, text: str = "hello", gateway: Gateway | None = None,
             **kw) -> requests.Response:
        gateway = gateway or self.gateway
        body = {"model": model, "messages": [{"role": "user", "content": text}]}
        return requests.post(gateway.url + "/v1/chat/completions", json=body,
                             headers={"Authorization": f"Bearer {key}", **kw.pop("headers", {})},
                             timeout=10, **kw)

    def teardown(self) -> None:
        for name in list(self.children):
            self.stop(name)
        for gw in self.gateways:
            gw.stop()


@contextmanager
def running_stack(db_url: str, prefix: str = "sluice-it-"):
    """API, controller and one gateway running against database `db_url`."""
    # Not pytest's tmp_path: nginx workers run as nobody when we are root and must
    # reach their prefix.
    top = Path(tempfile.mkdtemp(prefix=prefix))
    top.chmod(0o755)
    s = Stack(top, db_url)
    try:
        gw = s.new_gateway("gw1")
        s.write_config([gw])
        s.start_api()
        s.start_controller()
        yield s
    finally:
        s.teardown()
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def stack(module_db_url):
    """API, controller and one gateway shared by the module's tests, on a database of
    the module's: each test makes rows under names of its own."""
    with running_stack(module_db_url) as s:
        yield s


@pytest.fixture
def own_stack(db_url):
    """A stack of the test's own, on a fresh database: for a test that stops, restarts
    or adds parts, or changes what another test of its module relies on."""
    with running_stack(db_url) as s:
        yield s


@pytest.fixture
def demo(request):
    """One chat model on one demo backend, one consumer with one key, on the test's
    stack (`own_stack` when it asks for one, else the module's)."""
    stack = request.getfixturevalue("own_stack" if "own_stack" in request.fixturenames
                                    else "stack")
    url = stack.start_backend("chat-a")
    admin = stack.admin
    model = admin.create("models", name="chat-demo", timeout_ms=5000)
    backend = admin.create("backends", name="chat-a", model_id=model["id"], url=url,
                           protocol="openai", weight=100)
    consumer = admin.create("consumers", name="team-a")
    key = admin.create("keys", consumer_id=consumer["id"], name="ci")
    stack.wait_served()
    return {"model": model, "backend": backend, "consumer": consumer, "key": key,
            "backend_url": url}


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@contextmanager
def running_jobs_stack(db_url: str, amqp_url: str):
    """Async jobs (tests/integration/test_jobs*.py): API, controller, one gateway and
    one worker, on the session's broker; a chat model on a demo backend; consumers
    alice and bob with a key each."""
    top = Path(tempfile.mkdtemp(prefix="sluice-jobs-"))
    top.chmod(0o755)
    s = Stack(top, db_url)
    try:
        gw = s.new_gateway("gw1")
        s.extra_env.update(job_env(amqp_url, gw.url))
        s.write_config([gw])
        s.start_api()
        s.start_controller()
        start_worker(s)
        url = s.start_backend("chat-a")
        admin = s.admin
        model = admin.create("models", name="chat-demo", timeout_ms=5000)
        admin.create("backends", name="chat-a", model_id=model["id"], url=url,
                     protocol="openai", weight=100)
        keys = {}
        for name in ("alice", "bob"):
            consumer = admin.create("consumers", name=name)
            keys[name] = (consumer, admin.create("keys", consumer_id=consumer["id"],
                                                 name="ci")["key"])
        s.wait_served()
        s.keys = keys
        yield s
        # a Lua runtime error is a bug even when every answer looked right
        log = s.gateway.error_log.read_text(errors="replace")
        assert "runtime error" not in log and "[alert]" not in log, log[-3000:]
    finally:
        s.teardown()
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def jobs_stack(module_db_url, amqp_url):
    """A jobs stack (`running_jobs_stack`) shared by the module's tests, on a database
    of the module's: each test makes rows under names of its own."""
    with running_jobs_stack(module_db_url, amqp_url) as s:
        yield s


@pytest.fixture
def own_jobs_stack(db_url, amqp_url):
    """A jobs stack of the test's own: for a test that stops or restarts its worker or
    API, or reads counts over all jobs."""
    with running_jobs_stack(db_url, amqp_url) as s:
        yield s


@pytest.fixture
def bare_stack(db_url):
    """A Stack with nothing started and no gateway listed: the test writes its config
    and starts what it needs (members that register themselves, controllers)."""
    top = Path(tempfile.mkdtemp(prefix="sluice-it-"))
    top.chmod(0o755)
    s = Stack(top, db_url)
    s.write_config([])
    try:
        yield s
    finally:
        s.teardown()
        shutil.rmtree(top, ignore_errors=True)
