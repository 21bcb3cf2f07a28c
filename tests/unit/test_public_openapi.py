"""The gateway's caller API document: docs/public-openapi.json is what
control_plane/api/public_openapi.py builds, and a valid OpenAPI 3.1 document that
names every endpoint of lua/sluice/endpoints.lua."""
from __future__ import annotations

import json
import re

from openapi_spec_validator import validate

from control_plane.api import public_openapi


def test_checked_in_file_is_current():
    on_disk = public_openapi.OUTPUT.read_text()
    assert on_disk == public_openapi.render(), (
        "docs/public-openapi.json is stale: run python -m control_plane.api.public_openapi")


def test_valid_openapi_31():
    doc = json.loads(public_openapi.OUTPUT.read_text())
    validate(doc)
    assert doc["openapi"].startswith("3.1")


def test_every_gateway_endpoint_is_documented():
    endpoints = (public_openapi.OUTPUT.parents[1] / "lua" / "sluice" / "endpoints.lua")
    listed = re.findall(r"^--\s+(GET|POST)\s+(\S+)", endpoints.read_text(), re.M)
    assert len(listed) >= 8
    paths = public_openapi.document()["paths"]
    for method, path in listed:
        base, _, optional = path.partition("[")     # /v1/models[/{model}]
        for full in {base, base + optional.rstrip("]")}:
            assert method.lower() in paths.get(full, {}), f"{method} {full}"
