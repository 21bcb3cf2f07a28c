"""Two real `sluice controller` processes on one database: exactly one is active (the
advisory lock), the API and the metrics say which; kill -9 the active one and the
standby takes over within seconds, config changes still reach the gateway, versions
never go backwards and usage is counted once."""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from waiting import eventually

from control_plane.runtime import procs

REPO = Path(__file__).resolve().parents[2]


def start_controller(stack, name: str) -> tuple[object, int]:
    port = procs.free_port()
    env = dict(stack.env(), SLUICE_CONTROLLER_METRICS_PORT=str(port))
    proc = procs.spawn([sys.executable, "-m", "control_plane.cli", "controller"],
                       log=stack.tmp / f"{name}.log", env=env, cwd=REPO)
    stack.children[name] = proc
    return proc, port


def active_gauge(port: int) -> float:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return next(s.value for fam in text_string_to_metric_families(text)
                for s in fam.samples if s.name == "sluice_controller_active")


def controllers(stack) -> dict:
    r = stack.admin.session.get(stack.admin_url + "/controllers", timeout=5)
    assert r.status_code == 200, r.text
    return r.json()


def used_today(stack, consumer_id: int) -> int:
    r = stack.admin.session.get(f"{stack.admin_url}/consumers/{consumer_id}/usage",
                                timeout=5)
    assert r.status_code == 200, r.text
    return r.json()["today"]["requests"]


@pytest.fixture
def pair(bare_stack):
    """API, one listed gateway, a demo backend and two controllers."""
    s = bare_stack
    gw = s.new_gateway("gw1")
    s.write_config([gw])
    s.start_api()
    url = s.start_backend("chat-a")
    model = s.admin.create("models", name="chat-demo", timeout_ms=5000)
    s.admin.create("backends", name="chat-a", model_id=model["id"], url=url,
                   protocol="openai", weight=100)
    consumer = s.admin.create("consumers", name="team-a")
    key = s.admin.create("keys", consumer_id=consumer["id"], name="ci")["key"]
    a = start_controller(s, "controller-a")
    b = start_controller(s, "controller-b")
    return s, {a[0].pid: a, b[0].pid: b}, consumer["id"], key


def test_kill_the_active_controller_and_the_standby_takes_over(pair):
    stack, procs_by_pid, consumer_id, key = pair
    listing = eventually(lambda: (c := controllers(stack))["active"]
                         and len(c["items"]) == 2 and c, 20,
                         message="two controllers, one active")
    [active] = [c for c in listing["items"] if c["active"]]
    [standby] = [c for c in listing["items"] if not c["active"]]
    assert listing["items"][0] == active and active["active_since"]
    assert listing["active"] == active["id"] and standby["active_since"] is None
    active_proc, active_port = procs_by_pid[active["pid"]]
    standby_proc, standby_port = procs_by_pid[standby["pid"]]
    eventually(lambda: (active_gauge(active_port), active_gauge(standby_port)) == (1, 0), 5)

    stack.wait_served()
    for _ in range(5):
        assert stack.chat(key, "chat-demo").status_code == 200
    eventually(lambda: used_today(stack, consumer_id) == 5, 20)
    before = stack.gateway.served_version()

    os.kill(active_proc.pid, signal.SIGKILL)
    active_proc.wait(10)
    killed = time.monotonic()
    after = eventually(lambda: (c := controllers(stack))["active"] == standby["id"] and c,
                       15, message="the standby takes over")
    took = time.monotonic() - killed
    print(f"failover: standby active {took:.2f} s after kill -9 of the active controller")
    assert took < 10
    assert [c["id"] for c in after["items"] if c["active"]] == [standby["id"]]
    eventually(lambda: active_gauge(standby_port) == 1, 10)

    # a config change still reaches the gateway, and versions only go up
    stack.admin.create("models", name="after-failover")
    served = stack.wait_served(timeout=20)
    assert served > before
    for _ in range(3):
        assert stack.chat(key, "chat-demo").status_code == 200
    # the new controller collects usage again: 8 requests, none counted twice
    eventually(lambda: used_today(stack, consumer_id) == 8, 20)
    assert used_today(stack, consumer_id) == 8
    assert stack.gateway.served_version() == served


def test_a_clean_stop_hands_over_and_a_restarted_one_stands_by(pair):
    stack, procs_by_pid, _, _ = pair
    first = eventually(lambda: (c := controllers(stack))["active"]
                       and len(c["items"]) == 2 and c, 20)
    [active] = [c for c in first["items"] if c["active"]]
    name = "controller-a" if procs_by_pid[active["pid"]][0] is stack.children.get(
        "controller-a") else "controller-b"
    stack.stop(name)                                  # SIGTERM: releases the lock
    eventually(lambda: (c := controllers(stack))["active"] not in (None, active["id"]), 10)
    new_active = controllers(stack)["active"]
    start_controller(stack, name)                     # comes back as a standby
    eventually(lambda: len([c for c in controllers(stack)["items"]
                            if c["id"] != active["id"]]) == 2, 20)
    assert controllers(stack)["active"] == new_active
    stack.admin.create("models", name="still-pushed")
    stack.wait_served(timeout=20)


def test_a_frozen_active_controller_is_fenced_and_stands_by_when_it_thaws(pair):
    """SIGSTOP keeps its Postgres session (and the lock) alive: the standby ends that
    session once the lease has not been renewed for LEASE seconds."""
    stack, procs_by_pid, _, _ = pair
    listing = eventually(lambda: (c := controllers(stack))["active"]
                         and len(c["items"]) == 2 and c, 20)
    [active] = [c for c in listing["items"] if c["active"]]
    [standby] = [c for c in listing["items"] if not c["active"]]
    frozen, frozen_port = procs_by_pid[active["pid"]]
    _, standby_port = procs_by_pid[standby["pid"]]
    stack.wait_served()

    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        stopped = time.monotonic()
        eventually(lambda: controllers(stack)["active"] == standby["id"], 30,
                   message="the standby fences the frozen leader and takes over")
        print(f"fencing: standby active {time.monotonic() - stopped:.2f} s after SIGSTOP")
        stack.admin.create("models", name="while-frozen")
        stack.wait_served(timeout=20)
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    eventually(lambda: active_gauge(frozen_port) == 0, 15,
               message="the thawed controller learns it lost the lock")
    eventually(lambda: active_gauge(standby_port) == 1, 5)
    assert controllers(stack)["active"] == standby["id"]
    stack.admin.create("models", name="after-thaw")
    stack.wait_served(timeout=20)


def test_a_controller_whose_metrics_port_is_taken_serves_them_once_it_is_free(bare_stack):
    """A restarted controller may find its metrics port taken for a while (by another
    process's connection or server): it runs on, and serves /metrics as soon as the
    port is free, without a restart."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    env = dict(bare_stack.env(), SLUICE_CONTROLLER_METRICS_PORT=str(port))
    log = bare_stack.tmp / "controller.log"
    proc = procs.spawn([sys.executable, "-m", "control_plane.cli", "controller"],
                       log=log, env=env, cwd=REPO)
    bare_stack.children["controller"] = proc
    try:
        eventually(lambda: "cannot serve metrics" in log.read_text(errors="replace"),
                   timeout=30, message="the controller says the port is taken")
        assert proc.poll() is None, log.read_text()
    finally:
        holder.close()
    eventually(lambda: active_gauge(port) == 1, timeout=30,
               message="the controller's /metrics served on the freed port")
    assert proc.poll() is None
