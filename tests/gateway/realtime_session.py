"""What the realtime gateway tests share (a plain module: importing conftest or a test
module is fragile): demo realtime backends (control_plane/demo/realtime.py, real
WebSocket servers), snapshots that serve them, URLs and the access-log line of a
session."""
from __future__ import annotations

import base64
import sys

import pytest

from control_plane.runtime import procs
from gateway_readings import access_lines
from waiting import eventually

PLAN_KEY = "sk-test-realtime-plan-0123456789"


def start_realtime(name: str, log_dir) -> tuple[int, object]:
    port = procs.free_port()
    proc = procs.spawn([sys.executable, "-m", "control_plane.demo.realtime", "--port",
                        str(port), "--name", name], log=log_dir / f"{name}.log")
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
    except Exception:
        procs.stop(proc)
        raise
    return port, proc


def entry(id_: int, name: str, port: int, weight: int = 100) -> dict:
    return {"id": id_, "name": name, "protocol": "openai_realtime", "scheme": "http",
            "host": "127.0.0.1", "port": port, "host_header": f"localhost:{port}",
            "base_path": "", "weight": weight}


@pytest.fixture(scope="module")
def realtime_backends(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("realtime")
    started = []
    try:
        for name in ("rt-a", "rt-b"):
            started.append((name, *start_realtime(name, log_dir)))
        yield {name: port for name, port, _ in started}
    finally:
        for _, _, proc in started:
            procs.stop(proc)


def snapshot(helpers, backends, ports: dict, plan: dict | None = None,
             timeout_ms: int = 5000, version: int = 1, first_id: int = 10, **extra) -> dict:
    rt = [entry(first_id + i, name, port) for i, (name, port) in enumerate(sorted(ports.items()))]
    snap = helpers.make_snapshot(version, {
        "rt-demo": (timeout_ms, rt),
        "chat-demo": (5000, [backends["openai-a"].entry(1)])})
    if plan is not None:
        helpers.add_planned(snap, PLAN_KEY, plan, name="caller", plan_name="rt-plan")
    snap.update(extra)
    return snap


def ws_url(gw, model: str = "rt-demo") -> str:
    return gw.url.replace("http://", "ws://") + f"/v1/realtime?model={model}"


def line_of(gw, request_id: str) -> dict:
    """The access-log line of request `request_id` (lines of a test before may still be
    on their way: the log is buffered)."""
    def found():
        return [line for line in access_lines(gw, 1, timeout=1)
                if line["request_id"] == request_id]
    [line] = eventually(found, timeout=10)
    return line


def upgrade_headers(**more) -> dict:
    return {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": base64.b64encode(b"0123456789abcdef").decode(), **more}
