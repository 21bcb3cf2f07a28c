"""Fuzzing the admin API with schemathesis, against the real app on a real database.

The operations are shared out among a few test modules (`tests/api/test_fuzz_*.py`),
one group of path prefixes each, so that `make test`'s workers fuzz them side by side
instead of one module doing all eighty; `GROUPS` is the partition, and
tests/api/test_openapi.py checks that it covers every operation of the document once.
"""
from __future__ import annotations

import os

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance,
                                               response_schema_conformance,
                                               status_code_conformance)

from control_plane.api.views import API_PREFIX, OPENAPI_PATH

from .conftest import ADMIN_TOKEN

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]
# SLUICE_FUZZ_EXAMPLES=200 explores further, with fresh random examples each run
EXAMPLES_PER_OPERATION = int(os.environ.get("SLUICE_FUZZ_EXAMPLES", "12"))
DERANDOMIZE = "SLUICE_FUZZ_EXAMPLES" not in os.environ

# Group -> the first segment after /api/v1 of the paths it fuzzes. A resource's
# collection and items stay together (what one operation creates, the next may read).
GROUPS = {
    "catalog": ("models", "backends", "backend-presets", "model-types", "mappings", "routes",
                "phi-classes"),
    "access": ("consumers", "keys", "plans", "jwt-issuers", "content-policies", "tokens",
               "second-factor"),
    "fleet": ("gateways", "telemetry", "controllers", "fleet", "config", "snapshot",
              "scaling", "health", "queues"),
    "records": ("logs", "jobs", "webhook-deliveries", "audit", "usage", "openapi.json"),
}


def group_of(path: str) -> str | None:
    """The group fuzzing `path` (a path of the document, with the /api/v1 prefix)."""
    first = path.removeprefix(API_PREFIX + "/").split("/", 1)[0]
    owners = [name for name, prefixes in GROUPS.items() if first in prefixes]
    return owners[0] if len(owners) == 1 else None


def _strategy(operation):
    modes = []
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        try:
            modes.append(operation.as_strategy(mode))
        except Exception:   # an operation with nothing to negate has no negative mode
            continue
    return st.one_of(modes)


def fuzz(app, group: str) -> int:
    """Fuzz every operation of `group` with valid and invalid input: no 5xx, and every
    answer (status, content type, body) as the document says. Fails naming every
    failing operation; returns how many operations were fuzzed."""
    schema = schemathesis.openapi.from_wsgi(OPENAPI_PATH, app)
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    failures, operations = {}, 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if group_of(operation.path) != group:
            continue
        operations += 1

        @given(case=_strategy(operation))
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=DERANDOMIZE,
                  database=None, suppress_health_check=list(HealthCheck),
                  phases=[Phase.generate])
        def run(case):
            case.call_and_validate(headers=headers, checks=CHECKS)

        try:
            run()
        except Exception as exc:   # keep going: one report naming every failing operation
            failures[operation.label] = str(exc)[:2000]
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
    return operations
