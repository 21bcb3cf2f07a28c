"""The admin API fuzzed with schemathesis (tests/api/fuzzing.py), the access group:
consumers, keys, plans, JWT issuers, content policies and personal API tokens."""
from __future__ import annotations

from .fuzzing import GROUPS, fuzz


def test_fuzz_access(app):
    assert fuzz(app, "access") >= len(GROUPS["access"])
