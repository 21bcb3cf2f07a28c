"""The admin API fuzzed with schemathesis (tests/api/fuzzing.py), the records group:
logs, jobs, webhook deliveries, audit, usage and this document."""
from __future__ import annotations

from .fuzzing import GROUPS, fuzz


def test_fuzz_records(app):
    assert fuzz(app, "records") >= len(GROUPS["records"])
