"""The controller against a tiny real HTTP server standing in for a gateway."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.controller.process import Controller
from control_plane.db import make_engine
from control_plane.runtime.procs import free_port
from control_plane.services.resources import BACKENDS, GATEWAYS, MODELS
from control_plane.settings import load_settings
from control_plane.tables.config import Gateway
from control_plane.tables.records import BackendHealth

GATEWAY_TOKEN = "gw-token"


class FakeGateway:
    """POST /internal/snapshot like the Lua internal listener: answers the version.
    POST /internal/health bodies are kept in `health`."""

    def __init__(self, port: int = 0):
        self.pushes: list[dict] = []
        self.health: list[dict] = []
        self.status = 200
        self.ack: int | None = None  # answer this version instead of the pushed one
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Authorization") != f"Bearer {GATEWAY_TOKEN}":
                    return self._reply(403, {"error": {"code": 403, "type": "forbidden",
                                                       "message": "bad token"}})
                if self.path == "/internal/health" and fake.status == 200:
                    fake.health.append(json.loads(body))
                    return self._reply(200, {"version": fake.health[-1]["version"]})
                if self.path != "/internal/snapshot" or fake.status != 200:
                    return self._reply(fake.status, {"error": {
                        "code": fake.status, "type": "x", "message": "gateway says no"}})
                snap = json.loads(body)
                fake.pushes.append(snap)
                self._reply(200, {"version": fake.ack or snap["version"]})

            def _reply(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_gateway():
    fake = FakeGateway()
    yield fake
    fake.close()


@pytest.fixture
def engine(db_url):
    engine = make_engine(db_url)
    yield engine
    engine.dispose()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def settings_for(db_url, *gateways, **extra):
    env = {"DATABASE_URL": db_url, "SLUICE_GATEWAY_TOKEN": GATEWAY_TOKEN,
           "SLUICE_GATEWAYS": ",".join(g.url if hasattr(g, "url") else g for g in gateways),
           "SLUICE_PUSH_TIMEOUT": "2", **extra}
    return load_settings(env)


@pytest.fixture
def controller_for(db_url):
    made = []

    def make(*gateways, clock=None, loader=None, **extra):
        settings = settings_for(db_url, *gateways, **extra)
        kwargs = {"clock": clock or Clock()}
        if loader:
            kwargs["settings_loader"] = loader
        made.append(Controller(settings, **kwargs))
        return made[-1]
    yield make
    for controller in made:
        controller.close()


def gateway_row(engine, url) -> Gateway:
    with Session(engine) as session:
        return session.scalars(select(Gateway).where(Gateway.internal_url == url)).one()


def test_pushes_current_version_and_records_ack(fake_gateway, engine, controller_for):
    controller = controller_for(fake_gateway)
    controller.tick()
    assert [p["version"] for p in fake_gateway.pushes] == [1]
    assert set(fake_gateway.pushes[0]) >= {"version", "generated_at", "models", "consumers", "keys",
                                     "plans", "jwt", "mappings"}
    row = gateway_row(engine, fake_gateway.url)
    assert row.acked_version == 1 and row.last_error is None and row.last_push_at
    assert row.name == fake_gateway.url.removeprefix("http://")

    controller.tick()
    assert len(fake_gateway.pushes) == 1  # nothing changed, nothing pushed

    with Session(engine) as session:
        MODELS.create(session, {"name": "chat-demo"})
    controller.tick()
    assert [p["version"] for p in fake_gateway.pushes] == [1, 2]
    assert list(fake_gateway.pushes[1]["models"]) == ["chat-demo"]
    assert gateway_row(engine, fake_gateway.url).acked_version == 2


def test_gateways_registered_through_the_api_table_get_pushes(fake_gateway, engine,
                                                              controller_for):
    with Session(engine) as session:
        GATEWAYS.create(session, {"name": "edge-1", "internal_url": fake_gateway.url})
    controller_for().tick()
    assert len(fake_gateway.pushes) == 1
    assert gateway_row(engine, fake_gateway.url).name == "edge-1"


def test_snapshot_is_built_once_per_version(engine, controller_for):
    gateways = [FakeGateway(), FakeGateway()]
    try:
        controller_for(*gateways).tick()
        first, second = (g.pushes[0] for g in gateways)
        assert first == second
    finally:
        for g in gateways:
            g.close()


def test_failure_sets_last_error_and_backs_off(fake_gateway, engine, controller_for):
    clock = Clock()
    controller = controller_for(fake_gateway, clock=clock)
    fake_gateway.status = 503
    hits = []
    original = controller._push_one

    def counting(g, snap):
        hits.append(clock.now - 1000.0)
        return original(g, snap)
    controller._push_one = counting

    for at in (0, 0.1, 0.49, 0.5, 1.0, 1.49, 1.5, 3.4, 3.5):
        clock.now = 1000.0 + at
        controller.tick()
    # delays 0.5, 1, 2 after each failure: attempts at 0, 0.5, 1.5, 3.5
    assert hits == [0, 0.5, 1.5, 3.5]

    row = gateway_row(engine, fake_gateway.url)
    assert row.acked_version is None
    assert "HTTP 503" in row.last_error and "gateway says no" in row.last_error

    fake_gateway.status = 200
    clock.now += 8  # next delay was 4 s
    controller.tick()
    row = gateway_row(engine, fake_gateway.url)
    assert (row.acked_version, row.last_error) == (1, None)

    # success reset the backoff: the next failure waits 0.5 s again
    with Session(engine) as session:
        MODELS.create(session, {"name": "m"})
    fake_gateway.status = 500
    controller.tick()
    clock.now += 0.5
    controller.tick()
    assert len(hits) == 7


def test_backoff_caps_at_30_seconds(engine, controller_for):
    clock = Clock()
    controller = controller_for("http://127.0.0.1:1", clock=clock)
    for _ in range(12):
        controller.tick()
        clock.now += 60
    assert max(b.delay for b in controller._backoff.values()) == 30.0


def test_unreachable_gateway(engine, controller_for):
    url = f"http://127.0.0.1:{free_port()}"
    controller_for(url).tick()
    row = gateway_row(engine, url)
    assert row.acked_version is None
    assert "ConnectionError" in row.last_error


def test_wrong_ack_is_an_error(fake_gateway, engine, controller_for):
    fake_gateway.ack = 99
    controller_for(fake_gateway).tick()
    row = gateway_row(engine, fake_gateway.url)
    assert row.last_error == "gateway acknowledged version 99, expected 1"


def test_wrong_token_is_an_error(fake_gateway, engine, db_url):
    controller = Controller(load_settings({"DATABASE_URL": db_url,
                                           "SLUICE_GATEWAYS": fake_gateway.url,
                                           "SLUICE_GATEWAY_TOKEN": "nope"}))
    try:
        controller.tick()
    finally:
        controller.close()
    assert "HTTP 403" in gateway_row(engine, fake_gateway.url).last_error


def test_reload_rereads_config_file_and_repushes(fake_gateway, engine, db_url, tmp_path,
                                                 controller_for):
    config = tmp_path / "sluice.env"
    config.write_text(f"SLUICE_GATEWAYS={fake_gateway.url}\n")
    env = {"DATABASE_URL": db_url, "SLUICE_GATEWAY_TOKEN": GATEWAY_TOKEN,
           "SLUICE_CONFIG": str(config)}
    controller = controller_for(fake_gateway, loader=lambda: load_settings(env))
    controller.tick()
    controller.tick()
    assert len(fake_gateway.pushes) == 1

    second = FakeGateway()
    try:
        config.write_text(f"SLUICE_GATEWAYS={fake_gateway.url},{second.url}\n")
        controller.reload()
        controller.tick()
        assert [p["version"] for p in fake_gateway.pushes] == [1, 1]  # re-pushed
        assert [p["version"] for p in second.pushes] == [1]      # new from the file
        controller.tick()
        assert len(fake_gateway.pushes) == 2 and len(second.pushes) == 1
    finally:
        second.close()


def test_gateway_url_change_resets_ack(fake_gateway, engine, controller_for):
    with Session(engine) as session:
        gw_id = GATEWAYS.create(session, {"name": "edge",
                                          "internal_url": "http://127.0.0.1:1"}).id
    controller = controller_for()
    controller.tick()
    assert gateway_row(engine, "http://127.0.0.1:1").last_error
    with Session(engine) as session:
        GATEWAYS.update(session, gw_id, {"internal_url": fake_gateway.url})
    assert gateway_row(engine, fake_gateway.url).last_error is None
    controller._backoff.clear()
    controller.tick()
    assert gateway_row(engine, fake_gateway.url).acked_version == 1


def test_process_pushes_reloads_on_sighup_and_exits_on_sigterm(fake_gateway, db_url, tmp_path):
    env = {**os.environ, "DATABASE_URL": db_url, "SLUICE_GATEWAYS": fake_gateway.url,
           "SLUICE_GATEWAY_TOKEN": GATEWAY_TOKEN, "SLUICE_CONTROLLER_INTERVAL": "0.05"}
    code = ("import sys; from control_plane import settings;"
            "from control_plane.controller import process;"
            "sys.exit(process.main(settings.load_settings()))")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait(lambda: len(fake_gateway.pushes) == 1)
        proc.send_signal(signal.SIGHUP)
        _wait(lambda: len(fake_gateway.pushes) == 2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert out.count("outcome=ok") == 2
    assert f"url={fake_gateway.url} version=1 outcome=ok" in out
    assert "reload" in out and "controller stopped" in out


def _wait(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_restarted_controller_repushes_its_settings(fake_gateway, engine, controller_for):
    controller_for(fake_gateway).tick()
    assert gateway_row(engine, fake_gateway.url).acked_version == 1
    # same config version, new settings: the new process pushes them once
    controller = controller_for(fake_gateway, SLUICE_BREAKER_MIN_REQUESTS="4")
    controller.tick()
    assert [p["version"] for p in fake_gateway.pushes] == [1, 1]
    assert fake_gateway.pushes[1]["breaker"]["min_requests"] == 4
    controller.tick()
    assert len(fake_gateway.pushes) == 2


class SilentBackend:
    """Accepts connections and answers nothing until release() closes them: a hung
    model server, as a health probe meets it."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = threading.Event()
        self._released = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.sock.accept()
        self.accepted.set()
        self._released.wait(60)
        conn.close()

    def release(self):
        self._released.set()
        self.thread.join(10)
        self.sock.close()


def test_a_hung_backend_holds_no_tick(fake_gateway, engine, controller_for):
    hung = SilentBackend()
    try:
        with Session(engine) as session:
            model = MODELS.create(session, {"name": "chat-demo"})
            backend = BACKENDS.create(session, {"name": "hung", "model_id": model.id,
                                                "url": hung.url, "protocol": "openai"})
            bid = backend.id
        controller = controller_for(fake_gateway, SLUICE_HEALTH_TIMEOUT="60")
        controller.tick()   # pushes the snapshot, starts a probe round and returns
        assert len(fake_gateway.pushes) == 1
        assert hung.accepted.wait(10), "the health probe never reached the backend"
        # the tick came back while the probe still waits for an answer
        assert controller.health.probing
        with Session(engine) as session:
            MODELS.create(session, {"name": "other"})
        controller.tick()   # and the next tick pushes the next version meanwhile
        assert len(fake_gateway.pushes) == 2
        assert fake_gateway.pushes[1]["version"] > fake_gateway.pushes[0]["version"]
        assert controller.health.probing and fake_gateway.health == []
    finally:
        hung.release()      # the backend hangs up: the probe ends, unreachable

    deadline = time.monotonic() + 10
    while controller.health.probing:
        assert time.monotonic() < deadline, "the probe round did not end"
        time.sleep(0.05)
    controller.tick()       # pushes the finished round
    assert [h["backends"] for h in fake_gateway.health] == [{str(bid): {"state": "unreachable"}}]
    with Session(engine) as session:
        assert session.get(BackendHealth, bid).state == "unreachable"


def _join(engine, name, url, boot="b1", ttl=15.0):
    from control_plane.services import membership
    with Session(engine) as session:
        membership.register(session, membership.Registration(
            name=name, internal_url=url, boot_id=boot, sluice_version="0.1.0"), ttl)


def _silence(engine, name, seconds):
    from datetime import timedelta

    from sqlalchemy import func, update
    with engine.begin() as conn:
        conn.execute(update(Gateway).where(Gateway.name == name).values(
            last_seen_at=func.now() - timedelta(seconds=seconds)))


def test_live_members_are_pushed_to_and_stale_ones_are_not(fake_gateway, engine, controller_for):
    _join(engine, "edge-1", fake_gateway.url)
    controller = controller_for()          # no SLUICE_GATEWAYS: members only
    controller.tick()
    assert [p["version"] for p in fake_gateway.pushes] == [1]
    assert gateway_row(engine, fake_gateway.url).acked_version == 1

    _silence(engine, "edge-1", 60)         # missed its heartbeats: stale
    with Session(engine) as session:
        MODELS.create(session, {"name": "m"})
    controller.tick()
    assert len(fake_gateway.pushes) == 1 and fake_gateway.health == []

    _join(engine, "edge-1", fake_gateway.url)   # back, same boot: catches up
    controller.tick()
    assert [p["version"] for p in fake_gateway.pushes] == [1, 2]


def test_a_member_that_restarted_gets_the_snapshot_again_at_once(fake_gateway, engine,
                                                                 controller_for):
    _join(engine, "edge-1", fake_gateway.url)
    controller = controller_for()
    controller.tick()
    controller.tick()
    assert len(fake_gateway.pushes) == 1
    _join(engine, "edge-1", fake_gateway.url, boot="b2")   # a new nginx start
    controller.tick()
    assert [p["version"] for p in fake_gateway.pushes] == [1, 1]
