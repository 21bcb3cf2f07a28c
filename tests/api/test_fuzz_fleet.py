"""The admin API fuzzed with schemathesis (tests/api/fuzzing.py), the fleet group:
gateways, telemetry, controllers, the fleet, config, snapshot, scaling, health and queues."""
from __future__ import annotations

from .fuzzing import GROUPS, fuzz


def test_fuzz_fleet(app):
    assert fuzz(app, "fleet") >= len(GROUPS["fleet"])
