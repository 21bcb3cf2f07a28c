"""Gateways that join by themselves: `sluice gateway` processes started with the
control plane's URL register, heartbeat, get the current snapshot, go stale when
silent, come back and catch up; a restarted one serves its last-known-good file until
the controller pushes the current version. Real API, controller, Postgres and nginx."""
from __future__ import annotations

import os
import signal

import pytest
import requests
from fleet_members import listed, start_member, summary
from waiting import eventually

from control_plane.runtime import procs

TTL = 2.0


@pytest.fixture
def fleet(bare_stack):
    """API and controller, no gateway listed: members only; a short TTL."""
    with open(bare_stack.config_file, "a") as f:
        f.write(f"SLUICE_GATEWAY_TTL={TTL}\nSLUICE_GATEWAY_GONE_AFTER={3 * TTL}\n")
    bare_stack.start_api()
    bare_stack.start_controller()
    return bare_stack


def test_gateways_join_get_the_snapshot_and_show_in_the_api(fleet):
    fleet.admin.create("models", name="chat-demo")
    version = fleet.admin.config_version()
    a = start_member(fleet, "edge-a")
    b = start_member(fleet, "edge-b")
    for m in (a, b):
        eventually(lambda: m.view.served_version() == version, 20,
                   message=f"{m.name} serves the current snapshot")
        assert requests.get(m.url + "/readyz", timeout=5).status_code == 200
    found = eventually(lambda: (f := listed(fleet)) and all(
        f.get(n, {}).get("acked_version") == version for n in ("edge-a", "edge-b")) and f, 10)
    for m in (a, b):
        g = found[m.name]
        assert (g["registered"], g["live"], g["state"], g["lag"]) == (True, True, "live", 0)
        assert g["boot_id"] == m.view.usage()["boot"]
        assert g["internal_url"] == m.view.internal_url and g["sluice_version"]
    counts = summary(fleet)
    assert (counts["live"], counts["on_current_version"]) == (2, 2)
    # weights and backend readiness reach members too
    for m in (a, b):
        eventually(lambda: m.view.weights_status()["version"] > 0, 10)
        eventually(lambda: m.view.client.health_status(m.view.internal_url)["version"] > 0,
                   10)

    # a config change reaches every member
    fleet.admin.create("models", name="second")
    version = fleet.admin.config_version()
    for m in (a, b):
        eventually(lambda: m.view.served_version() == version, 20)


def test_a_silent_member_goes_stale_then_gone_and_catches_up_on_return(fleet):
    m = start_member(fleet, "edge-a")
    eventually(lambda: m.view.served_version() == fleet.admin.config_version(), 20)
    os.kill(m.proc.pid, signal.SIGSTOP)        # heartbeats stop; nginx keeps serving
    try:
        eventually(lambda: listed(fleet)["edge-a"]["state"] == "stale", 10)
        fleet.admin.create("models", name="while-away")
        version = fleet.admin.config_version()
        eventually(lambda: listed(fleet)["edge-a"]["state"] == "gone", 15)
        assert m.view.served_version() == version - 1      # not pushed to while away
        assert listed(fleet)["edge-a"]["lag"] == 1
        assert requests.get(m.url + "/readyz", timeout=5).status_code == 200
    finally:
        os.kill(m.proc.pid, signal.SIGCONT)
    eventually(lambda: m.view.served_version() == version, 20, message="catches up")
    g = eventually(lambda: (g := listed(fleet)["edge-a"])["lag"] == 0 and g, 10)
    assert g["state"] == "live"


def test_a_restarted_member_serves_its_lkg_then_catches_up(fleet):
    ports = tuple(procs.free_ports(2))
    m = start_member(fleet, "edge-a", ports)
    first = fleet.admin.config_version()
    eventually(lambda: m.view.served_version() == first, 20)
    boot = m.view.usage()["boot"]
    fleet.stop("edge-a")                                   # SIGTERM: it says it leaves
    assert listed(fleet)["edge-a"]["state"] == "gone"      # at once, not after the TTL
    fleet.stop("controller")
    fleet.admin.create("models", name="while-down")
    current = fleet.admin.config_version()

    m = start_member(fleet, "edge-a", ports)
    eventually(lambda: m.view.served_version() == first, 20)
    assert m.view.snapshot_status()["source"] == "lkg"     # no controller: last-known-good
    assert requests.get(m.url + "/readyz", timeout=5).status_code == 200
    g = eventually(lambda: (g := listed(fleet)["edge-a"])["state"] == "live" and g, 10)
    assert g["boot_id"] != boot and g["acked_version"] is None

    fleet.start_controller()
    eventually(lambda: m.view.served_version() == current, 20, message="catches up")


def test_usage_of_a_member_is_collected(fleet):
    url = fleet.start_backend("chat-a")
    model = fleet.admin.create("models", name="chat-demo", timeout_ms=5000)
    fleet.admin.create("backends", name="chat-a", model_id=model["id"], url=url,
                       protocol="openai", weight=100)
    consumer = fleet.admin.create("consumers", name="team-a")
    key = fleet.admin.create("keys", consumer_id=consumer["id"], name="ci")["key"]
    m = start_member(fleet, "edge-a")
    eventually(lambda: m.view.served_version() == fleet.admin.config_version(), 20)
    for _ in range(3):
        r = requests.post(m.url + "/v1/chat/completions", timeout=10,
                          headers={"Authorization": f"Bearer {key}"},
                          json={"model": "chat-demo",
                                "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text

    def used() -> int:
        r = fleet.admin.session.get(f"{fleet.admin_url}/consumers/{consumer['id']}/usage",
                                    timeout=5)
        return r.json()["today"]["requests"]
    eventually(lambda: used() == 3, 20, message="the member's usage reaches Postgres")
