"""Multi-host tests: one fleet (control-plane host, three gateway hosts, a models host,
a load balancer) in network namespaces for the whole folder; see fleet_harness.py.

They need root and iproute2. Where the machine cannot build the namespaces the
fixture raises: the tests fail loudly, never skip."""
from __future__ import annotations

import pytest
import requests

from fleet_harness import GATEWAY_PORT, new_fleet, remove_fleet
from waiting import eventually


@pytest.fixture(scope="session")
def fleet():
    f = new_fleet()
    try:
        yield f
    finally:
        remove_fleet(f)


@pytest.fixture
def report(capsys):
    """Print a scenario's counts into the test run's output (CI logs included), not
    only when the test fails."""
    def say(line: str) -> None:
        with capsys.disabled():
            print(f"\n    [fleet] {line}", flush=True)
    return say


@pytest.fixture
def healthy_fleet(fleet):
    """Every cable in, no partition, every gateway on the current version; healed
    again after the test, whatever it cut."""
    fleet.net.heal()
    version = fleet.admin.config_version()
    for gw in fleet.gateway_hosts:
        eventually(lambda: gw.served_version() >= version, timeout=30,
                   message=f"{gw.name} serving version {version}")
    everyone = {f"{gw.addr}:{GATEWAY_PORT}" for gw in fleet.gateway_hosts}

    def balanced():
        # any answer will do (401 here): the balancer marks down only on errors
        return {requests.get(fleet.lb_url + "/v1/models", timeout=5)
                .headers["X-Fleet-Upstream"] for _ in range(2 * len(everyone))} == everyone
    # a gateway cut off before is back in the balancer's rotation after fail_timeout
    eventually(balanced, timeout=30, interval=0.5, message="the balancer using every gateway")
    try:
        yield fleet
    finally:
        fleet.net.heal()
