"""Fixtures for the gateway tests: real nginx (through `Gateway`) and real demo
backends (subprocesses), snapshots pushed straight to the internal listener."""
from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests

from control_plane.runtime import procs
from control_plane.runtime.gateway import GatewayProcess as Gateway
from control_plane.runtime.nginx_conf import GatewayConfig
from control_plane.runtime.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]

KEY = "sk-test-alice-0123456789abcdef"            # consumer 1: every model
KEY_LIMITED = "sk-test-bob-0123456789abcdef"      # consumer 2: only chat-demo
KEY_EXPIRED = "sk-test-carol-0123456789abcdef"    # consumer 1, expired


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass
class Backend:
    name: str
    protocol: str
    port: int
    proc: object

    def entry(self, id: int, weight: int = 100, **over) -> dict:
        """This backend as a snapshot entry."""
        b = {"id": id, "name": self.name, "protocol": self.protocol, "scheme": "http",
             "host": "127.0.0.1", "port": self.port,
             "host_header": f"localhost:{self.port}", "base_path": "", "weight": weight}
        b.update(over)
        return b


def _start_backend(protocol: str, name: str, log_dir: Path) -> Backend:
    port = procs.free_port()
    proc = procs.spawn([sys.executable, "-m", "control_plane.demo.backends",
                        "--protocol", protocol, "--port", str(port), "--name", name],
                       log=log_dir / f"{name}.log", cwd=REPO)
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
    except Exception:
        procs.stop(proc)
        raise
    return Backend(name, protocol, port, proc)


@pytest.fixture(scope="session")
def backends(tmp_path_factory):
    """Three demo backends shared by all tests (they hold no state between requests)."""
    log_dir = tmp_path_factory.mktemp("backends")
    started = {}
    try:
        for protocol, name in (("openai", "openai-a"), ("openai", "openai-b"),
                               ("predict", "predict-a")):
            started[name] = _start_backend(protocol, name, log_dir)
        yield started
    finally:
        for b in started.values():
            procs.stop(b.proc)


@pytest.fixture(scope="session")
def protocol_backends(backends, tmp_path_factory):
    """One demo backend per protocol the adapters speak (plus the shared ones)."""
    log_dir = tmp_path_factory.mktemp("protocol-backends")
    started = {}
    try:
        for protocol in ("kserve_v2", "tfserving", "vendor-a", "vendor-b"):
            started[protocol] = _start_backend(protocol, protocol, log_dir)
        yield {"openai": backends["openai-a"], "predict": backends["predict-a"], **started}
    finally:
        for b in started.values():
            procs.stop(b.proc)


@pytest.fixture
def dead_port():
    """A port where nothing listens (connection refused)."""
    return procs.free_port()


def make_snapshot(version: int, models: dict, consumers: dict | None = None,
                  keys: dict | None = None, mappings: dict | None = None) -> dict:
    """A snapshot in the contract's shape. `models` maps name -> (timeout_ms, backends)."""
    if consumers is None:
        consumers = {"1": {"id": 1, "name": "alice", "allowed_models": None},
                     "2": {"id": 2, "name": "bob", "allowed_models": ["chat-demo"]}}
    if keys is None:
        keys = {key_hash(KEY): {"id": 1, "consumer_id": 1, "prefix": KEY[:10],
                                "expires_at": None},
                key_hash(KEY_LIMITED): {"id": 2, "consumer_id": 2, "prefix": KEY_LIMITED[:10],
                                        "expires_at": None},
                key_hash(KEY_EXPIRED): {"id": 3, "consumer_id": 1, "prefix": KEY_EXPIRED[:10],
                                        "expires_at": 1_000_000_000}}
    return {
        "version": version,
        "generated_at": "2026-11-29T16:50:00Z",
        "models": {name: {"id": i + 1, "name": name, "timeout_ms": timeout_ms,
                          "backends": bs}
                   for i, (name, (timeout_ms, bs)) in enumerate(models.items())},
        "consumers": consumers,
        "keys": keys,
        **({"mappings": mappings} if mappings is not None else {}),
    }


def add_planned(snap: dict, key: str, plan: dict, name: str = "planned",
                plan_name: str = "p", consumer_id: int = 3) -> dict:
    """Consumer 3 (or `consumer_id`: a gateway keeps a plan's counters per consumer id)
    named `name` on plan 7 (`plan_name` with the limits in `plan`), with API key `key`
    (key id 9), added to snapshot `snap`; returns `snap`."""
    snap["consumers"][str(consumer_id)] = {"id": consumer_id, "name": name,
                                           "allowed_models": None, "plan_id": 7}
    snap["keys"][key_hash(key)] = {"id": 9, "consumer_id": consumer_id, "prefix": key[:10],
                                   "expires_at": None}
    snap["plans"] = {"7": {"id": 7, "name": plan_name, **plan}}
    return snap


@pytest.fixture
def default_snapshot(backends):
    """chat-demo on openai-a, predict-demo on predict-a."""
    return make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "predict-demo": (5000, [backends["predict-a"].entry(2)]),
    })


@pytest.fixture
def prefix():
    """A gateway prefix the nginx workers (nobody) can reach: pytest's tmp_path sits
    under a 0700 folder, so make our own."""
    path = Path(tempfile.mkdtemp(prefix="sluice-gw-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _config(prefix: Path, **over) -> GatewayConfig:
    port, internal_port = procs.free_ports(2)
    return GatewayConfig(prefix=prefix, port=port, internal_port=internal_port,
                         token=secrets.token_urlsafe(24), **over)


@pytest.fixture
def gateway_factory(prefix):
    """Build and start gateways of their own (a config of the test's, a test that
    stops or kills nginx, or one that reads counters from a fresh start); everything
    started is stopped at teardown."""
    started: list[Gateway] = []

    def make(cfg: GatewayConfig | None = None, **over) -> Gateway:
        # a second gateway of the same test gets a prefix of its own
        own = prefix / f"gw{len(started)}" if started else prefix
        if started:
            own.mkdir()
            own.chmod(0o755)
        gw = Gateway(cfg or _config(own, **over))
        gw.start(log_to=prefix / "nginx.out")
        started.append(gw)
        return gw

    yield make
    for gw in started:
        gw.stop()
    for gw in started:
        assert_no_lua_errors(gw.error_log)


# what a Lua error logs: "runtime error" in a handler, "failed to run ..." when a
# filter phase's Lua fails (e.g. `failed to run body_filter_by_lua*`: no "runtime
# error" in that line, and a stream that hit one just stops)
LUA_ERRORS = ("runtime error", "failed to run", "[alert]", "[emerg]", "[crit]")


def assert_no_lua_errors(error_log: Path, offset: int = 0, gw=None) -> None:
    """A Lua runtime error is a bug even when the response looked right: fail on one
    in `error_log` past byte `offset`. With `gw`, its `log_offset` moves to the end of
    what was read first, so the next check reads none of these lines again."""
    try:
        with open(error_log, "rb") as f:
            f.seek(offset)
            text = f.read()
    except FileNotFoundError:
        text = b""
    if gw is not None:
        gw.log_offset = offset + len(text)
    bad = [line for line in text.decode(errors="replace").splitlines()
           if any(s in line for s in LUA_ERRORS)
           and not _peer_tls_alert(line)]
    assert not bad, "\n".join(bad)


def _peer_tls_alert(line: str) -> bool:
    """nginx logs a backend's TLS 1.3 alert (e.g. "certificate required", sent after
    the handshake) at [crit]: the backend's doing, tested on purpose, not ours."""
    return "[crit]" in line and "SSL_read() failed" in line and " alert " in line \
        and "from upstream" in line


@pytest.fixture
def redis_server():
    """A private, empty redis-server on a free port (never the machine's own); a
    missing redis-server fails the test loudly."""
    workdir = Path(tempfile.mkdtemp(prefix="sluice-redis-"))
    server = RedisServer.start(workdir)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


class SharedGateway(Gateway):
    """One nginx for every test of a module, each test in a turn of its own
    (`begin_turn`): the snapshot and weight versions a test pushes and reads count from
    what the gateway served when its turn began, so every test pushes version 1, 2, …
    as on a fresh gateway, and a newer version replaces the last test's tables whole.
    Counters kept per backend, key or consumer id (stats, breakers, rate limits, usage)
    do carry over: a test that reads them from zero uses `gateway_factory`."""

    snapshot_base = 0
    weights_base = 0
    log_offset = 0      # error.log: where the running test's lines start
    access_offset = 0   # access.log: likewise (gateway_readings.access_lines)

    def begin_turn(self) -> None:
        if not self.alive():   # a test before took nginx down: a new one, same prefix
            self.start()
        self.snapshot_base = int(Gateway.snapshot_status(self)["version"])
        self.weights_base = int(Gateway.weights_status(self).get("version") or 0)
        access_log = self.prefix / "logs" / "access.log"
        self.access_offset = access_log.stat().st_size if access_log.exists() else 0
        self.log_offset = self.error_log.stat().st_size if self.error_log.exists() else 0

    def end_turn(self) -> None:
        """The Lua-error check, on the error-log lines of this turn only (so a broken
        test fails alone)."""
        assert_no_lua_errors(self.error_log, self.log_offset, self)

    @staticmethod
    def _lift(doc, base: int):
        """`doc` with its version moved by `base` (an invalid version is left as sent)."""
        v = doc.get("version") if isinstance(doc, dict) else None
        if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            return {**doc, "version": v + base}
        return doc

    @staticmethod
    def _lower(doc: dict, base: int) -> dict:
        v = doc.get("version")
        if isinstance(v, int) and v >= base:
            doc["version"] = v - base
        return doc

    def _lowered(self, r: requests.Response, base: int) -> requests.Response:
        if r.status_code == 200:
            r._content = json.dumps(self._lower(r.json(), base)).encode()
        return r

    def push(self, snapshot: dict) -> requests.Response:
        return self._lowered(super().push(self._lift(snapshot, self.snapshot_base)),
                             self.snapshot_base)

    def snapshot_status(self) -> dict:
        return self._lower(super().snapshot_status(), self.snapshot_base)

    def push_weights(self, table: dict) -> requests.Response:
        return self._lowered(super().push_weights(self._lift(table, self.weights_base)),
                             self.weights_base)

    def weights_status(self) -> dict:
        return self._lower(super().weights_status(), self.weights_base)


@pytest.fixture(scope="module")
def shared_gateways():
    """Start SharedGateways for the module: `start(config)`, where `config(prefix)`
    makes the GatewayConfig, or `start(**over)`, the default one with `over` set. For
    a module whose tests need a listener config of their own (TLS certificates,
    workers): one gateway per config, each test taking a turn on it (`take_turn`)."""
    started: list[tuple[SharedGateway, Path]] = []

    def start(config=None, **over) -> SharedGateway:
        top = Path(tempfile.mkdtemp(prefix="sluice-gw-"))
        top.chmod(0o755)
        gw = SharedGateway(config(top) if config else _config(top, **over))
        started.append((gw, top))
        gw.start(log_to=top / "nginx.out")
        return gw

    try:
        yield start
        for gw, _ in started:
            gw.stop()
            assert_no_lua_errors(gw.error_log, gw.log_offset)
    finally:
        for gw, top in started:
            gw.stop()
            shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def gateway(shared_gateways):
    """A running gateway shared by the module's tests (SharedGateway); each test starts
    its turn with no snapshot version of its own yet."""
    return shared_gateways()


@pytest.fixture
def take_turn():
    """`take_turn(gw)`: the test's turn on a module's SharedGateway (begin_turn), its
    Lua-error check at teardown (end_turn). The `gateway` fixture's is automatic."""
    taken: list[SharedGateway] = []

    def take(gw: SharedGateway) -> SharedGateway:
        gw.begin_turn()
        taken.append(gw)
        return gw

    yield take
    for gw in taken:
        gw.end_turn()


@pytest.fixture(autouse=True)
def _gateway_turn(request):
    """Each test's turn on the module's gateway."""
    if "gateway" not in request.fixturenames:
        yield
        return
    take = request.getfixturevalue("take_turn")
    take(request.getfixturevalue("gateway"))
    yield


@pytest.fixture
def own_gateway(gateway_factory):
    """A running gateway of the test's own with no snapshot yet: for modules whose tests
    read per-backend state (circuits, queues, in-flight counts) from a fresh start."""
    return gateway_factory()


@pytest.fixture
def served(gateway, default_snapshot):
    """A running gateway serving `default_snapshot`."""
    r = gateway.push(default_snapshot)
    assert r.status_code == 200, r.text
    return gateway


def chat(gw: Gateway, model: str = "chat-demo", key: str | None = KEY, headers=None,
         **body) -> requests.Response:
    h = {"Authorization": f"Bearer {key}"} if key else {}
    h.update(headers or {})
    payload = {"model": model, "messages": [{"role": "user", "content": "hello there"}]}
    payload.update(body)
    return requests.post(gw.url + "/v1/chat/completions", json=payload, headers=h, timeout=10)


def assert_error(r: requests.Response, status: int, err_type: str) -> dict:
    """The error template, with the response's request id inside."""
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    err = r.json()["error"]
    assert err["code"] == status
    assert err["type"] == err_type
    assert isinstance(err["message"], str) and err["message"]
    assert err["request_id"] and err["request_id"] == r.headers["X-Request-Id"]
    return err


@pytest.fixture
def helpers():
    """The helpers above, for test modules (importing conftest is fragile)."""
    return SimpleNamespace(KEY=KEY, KEY_LIMITED=KEY_LIMITED, KEY_EXPIRED=KEY_EXPIRED,
                           key_hash=key_hash, make_snapshot=make_snapshot, chat=chat,
                           assert_error=assert_error, add_planned=add_planned)
