"""GPU telemetry moves traffic, end to end: a real `sluice agent` (simulated source)
reports to the real API, the controller computes weights and pushes them to the
real gateway, and the backend with more free memory gets proportionally more."""
from __future__ import annotations

import json
import sys
import time
from collections import Counter

from control_plane.runtime import procs

N = 200
TOLERANCE = 0.08   # SWRR is exact per worker; 2 workers, arbitrary connection spread


def _gpus(path, free_a: float, free_b: float) -> None:
    total = 80_000
    path.write_text(json.dumps({"gpus": [
        {"name": "NVIDIA A100-SXM4-80GB", "memory_total_mb": total,
         "memory_used_mb": int(total * (1 - free_a))},
        {"name": "NVIDIA A100-SXM4-80GB", "memory_total_mb": total,
         "memory_used_mb": int(total * (1 - free_b))}]}))




def _share_a(stack, key) -> float:
    seen = Counter(stack.chat(key, "gpu-chat").headers["X-Demo-Backend"] for _ in range(N))
    return seen["gpu-a"] / N


def test_free_memory_moves_traffic_and_agent_survives_api_restart(own_stack):
    stack = own_stack  # it restarts the API: a stack of its own
    admin = stack.admin
    url_a, url_b = stack.start_backend("gpu-a"), stack.start_backend("gpu-b")
    # memory-only coefficients: traffic proportional to free memory, exactly
    model = admin.create("models", name="gpu-chat", timeout_ms=5000,
                         weight_coefficients={"memory": 1, "success": 0, "latency": 0})
    a = admin.create("backends", name="gpu-a", model_id=model["id"], url=url_a,
                     protocol="openai")
    b = admin.create("backends", name="gpu-b", model_id=model["id"], url=url_b,
                     protocol="openai")
    consumer = admin.create("consumers", name="t")
    key = admin.create("keys", consumer_id=consumer["id"])["key"]
    stack.wait_served()

    gpus = stack.tmp / "gpus.json"
    _gpus(gpus, 0.8, 0.2)
    cfg = stack.tmp / "agent.json"
    cfg.write_text(json.dumps({"host": "gpu-host-1",
                               "backends": {"0": ["gpu-a"], "1": ["gpu-b"]}}))
    stack.spawn("agent", [sys.executable, "-m", "control_plane.cli", "agent",
                          "--source", "simulated", "--simulated-gpus", str(gpus),
                          "--config", str(cfg), "--interval", "0.5",
                          "--control-plane", f"http://127.0.0.1:{stack.api_port}"])
    stack.wait_weights([a["id"], b["id"]], [800, 200])
    share = _share_a(stack, key)
    assert abs(share - 0.8) <= TOLERANCE, share

    # A telemetry change reaches the gateway within agent + weight intervals.
    _gpus(gpus, 0.25, 0.75)
    took = stack.wait_weights([a["id"], b["id"]], [250, 750])
    print(f"telemetry change -> gateway weights in {took:.2f}s "
          "(agent interval 0.5s, weights interval 1s)")
    share = _share_a(stack, key)
    assert abs(share - 0.25) <= TOLERANCE, share

    # The control plane restarts; the agent keeps going and its reports land again.
    stack.stop("api")
    time.sleep(1.5)
    stack.start_api()
    _gpus(gpus, 0.5, 0.5)
    stack.wait_weights([a["id"], b["id"]], [500, 500])
    assert stack.children["agent"].poll() is None

    # The operator sees both GPUs, their class and that they are fresh.
    gpus_api = admin._call("GET", "/telemetry").json()["gpus"]
    assert [(g["host"], g["index"], g["gpu_class"], g["stale"]) for g in gpus_api] == [
        ("gpu-host-1", 0, "A100", False), ("gpu-host-1", 1, "A100", False)]
