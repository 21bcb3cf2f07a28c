"""SLUICE_OTLP_ENDPOINT: where the log shipper's spans go (control_plane/clients/tracing.py)."""
from __future__ import annotations

import pytest

from control_plane.clients import tracing
from control_plane.settings import SettingsError, load_settings


def test_no_endpoint_no_export():
    assert tracing.from_settings(load_settings({})) is None


@pytest.mark.parametrize("value, url", [
    ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
    ("http://otel:4318/", "http://otel:4318/v1/traces"),
    ("https://otel.example/v1/traces", "https://otel.example/v1/traces"),
])
def test_endpoint_becomes_the_traces_url(value, url):
    export = tracing.from_settings(load_settings({"SLUICE_OTLP_ENDPOINT": value}))
    try:
        assert export.url == url
    finally:
        export.shutdown()


def test_bad_endpoint_is_refused():
    with pytest.raises(SettingsError, match="SLUICE_OTLP_ENDPOINT"):
        load_settings({"SLUICE_OTLP_ENDPOINT": "otel:4318"})


def test_a_line_without_trace_ids_is_no_span():
    resource = tracing.Resource.create({})
    assert tracing.to_span({"time": "1.0", "status": "200"}, "gw", resource) is None
    assert tracing.to_span({"time": "1.0", "trace_id": "0" * 32, "span_id": "1" * 16},
                           "gw", resource) is None
