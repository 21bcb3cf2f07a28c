"""Request spans for OpenTelemetry: the log shipper turns each access-log line into
one span and exports it over OTLP/HTTP (protobuf) when SLUICE_OTLP_ENDPOINT is set.

The gateway only carries the W3C trace context (lua/sluice/trace.lua: the trace id
of the caller's `traceparent` or a new one, its own span id, the caller's span as
parent) and writes the ids into its access log; everything else happens here, off
the hot path. A span is named after the request (`POST /v1/chat/completions`), of
kind SERVER, timed from the line (`time` is the end, `latency_ms` before it the
start), with the model, backend, consumer, status and token counts as attributes;
a 5xx answer is an error span.

Spans go through the SDK's BatchSpanProcessor: the shipper hands them over after
its transaction committed, and a thread of the processor exports them, so a slow or
absent collector never holds up shipping (what does not fit the queue is dropped
and counted by the SDK).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

log = logging.getLogger("sluice.tracing")

TRACES_PATH = "/v1/traces"
SERVICE_NAME = "sluice-gateway"
SCOPE = InstrumentationScope("sluice.gateway")
# access-log field -> span attribute (strings)
_TEXT = {"model": "sluice.model", "backend": "sluice.backend", "consumer": "sluice.consumer",
         "plan": "sluice.plan", "route": "sluice.route", "request_id": "sluice.request_id",
         "cache": "sluice.cache", "error_type": "error.type", "fallback": "sluice.fallback",
         "method": "http.request.method", "path": "url.path"}
# access-log field -> span attribute (integers)
_INT = {"status": "http.response.status_code", "prompt_tokens": "gen_ai.usage.input_tokens",
        "completion_tokens": "gen_ai.usage.output_tokens",
        "upstream_ms": "sluice.upstream_ms", "latency_ms": "sluice.latency_ms",
        "bytes_sent": "http.response.body.size"}


def traces_url(endpoint: str) -> str:
    """SLUICE_OTLP_ENDPOINT as the URL spans are POSTed to: a collector's base URL
    (`http://otel:4318`) gets OTLP's `/v1/traces`; a URL ending in it is kept."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


def _hex(value: Any, digits: int) -> int | None:
    if not isinstance(value, str) or len(value) != digits:
        return None
    try:
        n = int(value, 16)
    except ValueError:
        return None
    return n or None


def _int(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None


def to_span(rec: Mapping[str, Any], gateway: str, resource: Resource) -> ReadableSpan | None:
    """One access-log record as a span, or None when it carries no trace context."""
    trace_id, span_id = _hex(rec.get("trace_id"), 32), _hex(rec.get("span_id"), 16)
    if trace_id is None or span_id is None:
        return None
    try:
        end_ns = int(float(rec["time"]) * 1e9)
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    latency = _int(rec.get("latency_ms")) or 0
    flags = TraceFlags(TraceFlags.SAMPLED)
    parent_id = _hex(rec.get("parent_span_id"), 16)
    parent = (SpanContext(trace_id, parent_id, is_remote=True, trace_flags=flags)
              if parent_id else None)
    attributes: dict[str, Any] = {"sluice.gateway": gateway}
    for field, name in _TEXT.items():
        v = rec.get(field)
        if isinstance(v, str) and v:
            attributes[name] = v
    for field, name in _INT.items():
        v = _int(rec.get(field))
        if v is not None:
            attributes[name] = v
    status_code = attributes.get("http.response.status_code", 0)
    status = (Status(StatusCode.ERROR, rec.get("error_type") or None)
              if status_code >= 500 else Status(StatusCode.UNSET))
    return ReadableSpan(
        name=f"{rec.get('method') or 'HTTP'} {rec.get('path') or '/'}",
        context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags),
        parent=parent, resource=resource, attributes=attributes, kind=SpanKind.SERVER,
        status=status, start_time=end_ns - latency * 1_000_000, end_time=end_ns,
        instrumentation_scope=SCOPE)


class SpanExport:
    """Exports access-log records as spans to one OTLP/HTTP endpoint, in batches."""

    def __init__(self, endpoint: str, *, schedule_delay_ms: float = 1000,
                 headers: Mapping[str, str] | None = None, timeout_s: float = 10.0):
        self.url = traces_url(endpoint)
        self.resource = Resource.create({"service.name": SERVICE_NAME})
        self.processor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=self.url, headers=dict(headers or {}),
                             timeout=timeout_s),
            schedule_delay_millis=schedule_delay_ms)

    def records(self, gateway: str, recs: list[Mapping[str, Any]]) -> int:
        """Hand the records' spans to the batch processor; returns how many."""
        n = 0
        for rec in recs:
            span = to_span(rec, gateway, self.resource)
            if span is not None:
                self.processor.on_end(span)
                n += 1
        return n

    def flush(self, timeout_ms: int = 10_000) -> bool:
        return self.processor.force_flush(timeout_ms)

    def shutdown(self) -> None:
        self.processor.shutdown()


def from_settings(settings) -> SpanExport | None:
    """The exporter SLUICE_OTLP_ENDPOINT asks for, or None (no tracing export)."""
    endpoint = getattr(settings, "otlp_endpoint", None)
    if not endpoint:
        return None
    log.info("exporting request spans to %s", traces_url(endpoint))
    return SpanExport(endpoint)
