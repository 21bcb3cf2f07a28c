"""Scaling signals per model from the shipped logs (and GPU utilisation when known),
through the admin API, the controller's metrics and its webhook."""
from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from control_plane.controller.ship_loop import Shipper
from control_plane.db import make_engine, make_sessionmaker
from control_plane.services.scaling import Thresholds, recommend
from control_plane.settings import parse_sources



def line(rid, model, latency, age_s=5.0):
    # relative to the moment the fixture writes the log: the window is the last 60 s
    now = datetime.now(timezone.utc)
    return json.dumps({"time": str((now - timedelta(seconds=age_s)).timestamp()),
                       "request_id": rid, "model": model, "status": "200",
                       "latency_ms": str(latency)})


@pytest.fixture
def app(db_url, monkeypatch):
    """The admin app with thresholds the traffic below crosses: up at 1.5 req/s and
    p99 2.5 s."""
    from control_plane.app import create_app, dispose

    monkeypatch.setenv("SLUICE_SCALE_UP_RPS", "1.5")
    monkeypatch.setenv("SLUICE_SCALE_UP_P99_MS", "2500")
    app = create_app({"DATABASE_URL": db_url, "ADMIN_TOKEN": "test-admin-token",
                      "TESTING": True})
    yield app
    dispose(app)


@pytest.fixture
def traffic(db_url, make, tmp_path):
    """busy: 120 requests in the last minute, p99 3 s; quiet: 3; idle: none."""
    for name in ("busy", "quiet", "idle"):
        make("model", name=name)
    lines = [line(f"b{i}", "busy", 3000 if i % 2 else 100) for i in range(120)]
    lines += [line(f"q{i}", "quiet", 50) for i in range(3)]
    lines += [line("old", "quiet", 50, age_s=3600)]   # outside the window
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n")
    engine = make_engine(db_url)
    assert Shipper(engine, parse_sources(f"gw={path}")).ship_once() == 124
    yield engine
    engine.dispose()


def test_admin_api_recommends_per_model(api, traffic):
    r = api("get", "/scaling")
    assert r.status_code == 200
    by_model = {m["model"]: m for m in r.get_json()["models"]}
    assert by_model["busy"]["action"] == "up"
    assert by_model["busy"]["requests_per_second"] == 2.0
    assert by_model["busy"]["p99_ms"] == 3000
    # little traffic, but without GPU telemetry nothing is scaled down
    assert by_model["quiet"]["action"] == "hold"
    assert by_model["quiet"]["requests_per_minute"] == 3
    assert by_model["idle"]["action"] == "hold" and by_model["idle"]["p99_ms"] is None
    assert by_model["busy"]["gpu_utilization"] is None


def test_down_needs_low_traffic_and_idle_gpus(traffic):
    gpu = {"quiet": 0.05, "idle": 0.40, "busy": 0.01}.get
    with make_sessionmaker(traffic)() as session:
        recs = {m["model"]: m for m in recommend(
            session, Thresholds(up_requests_per_second=1.5, up_p99_ms=2500),
            gpu=lambda _s: {k: gpu(k) for k in ("quiet", "idle", "busy")})}
    assert recs["quiet"]["action"] == "down"
    assert recs["idle"]["action"] == "hold"      # GPU busy enough
    assert recs["busy"]["action"] == "up"        # 2 req/s >= 1.5 and p99 >= 2.5 s


def test_controller_posts_changes_to_the_webhook_and_exports_them(db_url, traffic):
    from control_plane.controller import cp_metrics
    from control_plane.controller.process import Controller
    from control_plane.settings import Settings

    got = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    controller = Controller(Settings(
        database_url=db_url, gateway_token="t" * 20, scale_up_rps=1.5, scale_up_p99_ms=2500,
        scaling_webhook=f"http://127.0.0.1:{server.server_port}/hook"))
    try:
        changed = controller.scaling_tick(force=True)
        assert {r["model"]: r["action"] for r in changed} == {
            "busy": "up", "quiet": "hold", "idle": "hold"}
        assert controller.scaling_tick(force=True) == []     # nothing changed: no POST
    finally:
        controller.close()
        server.shutdown()
    assert len(got) == 1 and got[0]["source"] == "sluice"
    assert {r["model"] for r in got[0]["recommendations"]} == {"busy", "quiet", "idle"}
    assert cp_metrics.SCALING.labels("busy")._value.get() == 1


def test_admin_api_scales_down_an_idle_model_from_its_gpu_telemetry(api, make, traffic):
    """The GPU side comes from what the agents report for each model's backends."""
    from control_plane.services import telemetry

    quiet = {m["name"]: m for m in api("get", "/models").get_json()["items"]}["quiet"]
    make("backend", name="quiet-gpu", model_id=quiet["id"])
    with make_sessionmaker(traffic)() as session:
        telemetry.ingest(session, "gpu-host", "simulated", [telemetry.GpuReading(
            index=0, name="NVIDIA T4", gpu_class="T4", memory_total_mb=16384,
            memory_used_mb=1024, utilization_pct=4.0, backends=("quiet-gpu",))])

    by_model = {m["model"]: m for m in api("get", "/scaling").get_json()["models"]}
    assert by_model["quiet"]["action"] == "down"
    assert by_model["quiet"]["gpu_utilization"] == 0.04
    assert by_model["idle"]["action"] == "hold"   # no telemetry: not scaled down


def test_controller_exports_telemetry_age_and_stale_gpus(db_url, make):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from control_plane.controller import cp_metrics
    from control_plane.controller.process import Controller
    from control_plane.services import telemetry
    from control_plane.settings import Settings

    make("backend", name="fresh-b")
    make("backend", name="old-b")
    engine = make_engine(db_url)
    now = datetime.now(timezone.utc)
    with make_sessionmaker(engine)() as session:
        telemetry.ingest(session, "host-a", "simulated", [telemetry.GpuReading(
            index=0, name="NVIDIA H200", gpu_class="H200", memory_total_mb=141312,
            memory_used_mb=35328, utilization_pct=90.0, backends=("fresh-b",))], now=now)
        telemetry.ingest(session, "host-b", "simulated", [telemetry.GpuReading(
            index=0, name="NVIDIA T4", gpu_class="T4", memory_total_mb=16384,
            memory_used_mb=0, backends=("old-b",))], now=now - timedelta(minutes=5))
    engine.dispose()
    controller = Controller(Settings(database_url=db_url, gateway_token="t" * 20))
    try:
        controller.scaling_tick(force=True)
    finally:
        controller.close()

    samples = {(s.name, s.labels.get("host")): s.value
               for fam in text_string_to_metric_families(
                   generate_latest(cp_metrics.REGISTRY).decode())
               for s in fam.samples if s.name.startswith(("sluice_telemetry", "sluice_gpu"))}
    assert samples[("sluice_telemetry_stale_gpus", None)] == 1
    assert samples[("sluice_telemetry_age_seconds", "host-b")] >= 300
    assert samples[("sluice_telemetry_age_seconds", "host-a")] < 60
    assert samples[("sluice_gpu_utilization_ratio", "host-a")] == 0.9   # the GPU alert's input
    assert samples[("sluice_gpu_memory_free_ratio", "host-a")] == 0.75
    assert ("sluice_gpu_utilization_ratio", "host-b") not in samples  # stale: left out
