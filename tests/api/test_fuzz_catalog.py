"""The admin API fuzzed with schemathesis (tests/api/fuzzing.py), the catalog group:
models, backends, model types, mappings and routes."""
from __future__ import annotations

from .fuzzing import GROUPS, fuzz


def test_fuzz_catalog(app):
    assert fuzz(app, "catalog") >= len(GROUPS["catalog"])
