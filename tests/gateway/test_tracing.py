"""W3C trace context through the gateway, and one OTLP span per request from the log
shipper to a real OTLP/HTTP receiver (a small HTTP server that decodes the protobuf
ExportTraceServiceRequest with opentelemetry-proto)."""
from __future__ import annotations

import gzip
import re
from contextlib import contextmanager

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse)

from control_plane.clients.tracing import SpanExport
from control_plane.controller.ship_loop import Shipper
from control_plane.db import make_engine
from control_plane.settings import parse_sources
from backend_http import Backend, entry, served
from gateway_readings import access_lines
from waiting import eventually

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


class _Backend(Backend):
    """An OpenAI-style backend that records the headers it was sent."""

    seen: list = []

    def do_POST(self):
        self.read_body()
        type(self).seen.append(dict(self.headers))
        out = (b'{"id": "c1", "object": "chat.completion", "model": "m", "choices": '
               b'[{"index": 0, "message": {"role": "assistant", "content": "ok"}, '
               b'"finish_reason": "stop"}], "usage": {"prompt_tokens": 3, '
               b'"completion_tokens": 1, "total_tokens": 4}}')
        self.answer(200, out)


class _Receiver(Backend):
    """OTLP/HTTP: POST /v1/traces, a protobuf ExportTraceServiceRequest."""

    protocol_version = "HTTP/1.0"
    got: list = []

    def do_POST(self):
        body = self.read_body()
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        type(self).got.append((self.path, self.headers.get("Content-Type"), req))
        self.answer(200, ExportTraceServiceResponse().SerializeToString(),
                    "application/x-protobuf")


@contextmanager
def tracing(gateway, helpers):
    """`gateway` serving chat-demo on the traced backend."""
    _Backend.seen = []
    with served(_Backend) as port:
        b = entry(1, "traced-a", "openai", port)
        r = gateway.push(helpers.make_snapshot(1, {"chat-demo": (5000, [b])}))
        assert r.status_code == 200, r.text
        yield gateway


@pytest.fixture
def traced(gateway, helpers):
    with tracing(gateway, helpers) as gw:
        yield gw


@pytest.fixture
def own_traced(gateway_factory, helpers):
    """Like `traced`, on a gateway of its own (for a test that ships its whole log)."""
    with tracing(gateway_factory(), helpers) as gw:
        yield gw


@pytest.fixture
def receiver():
    _Receiver.got = []
    with served(_Receiver) as port:
        yield port


def _received() -> int:
    return sum(len(ss.spans) for _, _, req in _Receiver.got
               for rs in req.resource_spans for ss in rs.scope_spans)


def _line(gw, rid):
    return eventually(lambda: [l for l in access_lines(gw, 1, timeout=0.5)
                               if l["request_id"] == rid], 10, message=rid)[0]


def test_incoming_traceparent_is_continued_and_forwarded(traced, helpers):
    r = helpers.chat(traced, headers={
        "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01", "tracestate": "vendor=1",
        "X-Request-Id": "trace-continued"})
    assert r.status_code == 200, r.text
    sent = _Backend.seen[-1]
    trace_id, span_id, flags = TRACEPARENT.match(sent["traceparent"]).groups()
    assert trace_id == CALLER_TRACE and flags == "01"
    assert span_id != CALLER_SPAN            # the gateway's own span is the parent now
    assert sent["tracestate"] == "vendor=1"
    line = _line(traced, "trace-continued")
    assert (line["trace_id"], line["span_id"], line["parent_span_id"]) == (
        CALLER_TRACE, span_id, CALLER_SPAN)


@pytest.mark.parametrize("incoming", [
    None,
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   # zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   # zero span id
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   # version ff
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   # upper case
    "garbage",
])
def test_a_trace_starts_here_without_a_valid_traceparent(traced, helpers, incoming):
    rid = f"trace-new-{abs(hash(incoming))}"
    headers = {"X-Request-Id": rid}
    if incoming:
        headers["traceparent"] = incoming
    assert helpers.chat(traced, headers=headers).status_code == 200
    trace_id, span_id, _ = TRACEPARENT.match(_Backend.seen[-1]["traceparent"]).groups()
    assert trace_id != CALLER_TRACE.lower() and int(trace_id, 16) != 0
    line = _line(traced, rid)
    assert (line["trace_id"], line["span_id"], line["parent_span_id"]) == (
        trace_id, span_id, "")


def test_refused_requests_carry_trace_ids_too(traced, helpers):
    r = helpers.chat(traced, key="sk-wrong-0123456789",
                     headers={"X-Request-Id": "trace-refused",
                              "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})
    assert r.status_code == 403
    line = _line(traced, "trace-refused")
    assert line["trace_id"] == CALLER_TRACE and line["parent_span_id"] == CALLER_SPAN


def test_shipper_exports_one_span_per_request(own_traced, helpers, receiver, db_url):
    traced = own_traced
    for i in range(3):
        headers = {"X-Request-Id": f"span-{i}"}
        if i == 0:
            headers["traceparent"] = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
        assert helpers.chat(traced, headers=headers).status_code == 200
    assert helpers.chat(traced, key="sk-wrong-0123456789",
                        headers={"X-Request-Id": "span-403"}).status_code == 403
    lines = {l["request_id"]: l for l in access_lines(traced, 4)}
    assert len(lines) == 4

    engine = make_engine(db_url)
    spans = SpanExport(f"http://127.0.0.1:{receiver}",
                       schedule_delay_ms=100)
    try:
        shipper = Shipper(engine, parse_sources(f"gw1={traced.prefix}/logs/access.log"),
                          spans=spans)
        assert shipper.ship_once() == 4
        assert spans.flush()
        eventually(lambda: _received() >= 4, 10)
        assert shipper.ship_once() == 0 and spans.flush()   # nothing twice
        assert _received() == 4
    finally:
        spans.shutdown()
        engine.dispose()

    path, ctype, _ = _Receiver.got[0]
    assert path == "/v1/traces" and ctype == "application/x-protobuf"
    exported = {}
    for _, _, req in _Receiver.got:
        for rs in req.resource_spans:
            resource = {a.key: a.value.string_value for a in rs.resource.attributes}
            assert resource["service.name"] == "sluice-gateway"
            for ss in rs.scope_spans:
                for span in ss.spans:
                    attrs = {a.key: a.value for a in span.attributes}
                    exported[attrs["sluice.request_id"].string_value] = (span, attrs)
    assert set(exported) == set(lines)

    span, attrs = exported["span-0"]
    line = lines["span-0"]
    assert span.trace_id.hex() == CALLER_TRACE == line["trace_id"]
    assert span.span_id.hex() == line["span_id"]
    assert span.parent_span_id.hex() == CALLER_SPAN
    assert span.name == "POST /v1/chat/completions"
    assert span.kind == span.SPAN_KIND_SERVER
    assert attrs["sluice.model"].string_value == "chat-demo"
    assert attrs["sluice.backend"].string_value == "traced-a"
    assert attrs["sluice.consumer"].string_value == "alice"
    assert attrs["http.response.status_code"].int_value == 200
    assert span.end_time_unix_nano - span.start_time_unix_nano == \
        int(line["latency_ms"]) * 1_000_000
    assert span.end_time_unix_nano == int(float(line["time"]) * 1e9)

    refused, rattrs = exported["span-403"]
    assert rattrs["http.response.status_code"].int_value == 403
    assert rattrs["error.type"].string_value == "forbidden"
    assert refused.parent_span_id == b""   # the trace started at the gateway
