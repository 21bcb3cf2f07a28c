"""Read the gateways' Prometheus metrics (GET /metrics on each internal listener) and
add them up per model and per backend, for the admin dashboard.

Counters are cumulative; the dashboard turns two readings into requests/s, error
rate and p99 over the interval between them. Nothing is stored here.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from control_plane.clients.gateway import GatewayClient, GatewayError

REQUESTS = "sluice_requests_total"
DURATION_BUCKET = "sluice_request_duration_seconds_bucket"
WEIGHT = "sluice_backend_weight"
CIRCUIT = "sluice_backend_circuit_state"
CIRCUIT_NAMES = {0: "closed", 1: "open", 2: "half-open"}
QUEUE_DEPTH = "sluice_queue_depth"   # waiting requests per model and class (a gauge)
SESSIONS = "sluice_realtime_sessions"   # open realtime (WebSocket) sessions per model
_LINE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample in Prometheus text format 0.0.4."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE_RE.match(line)
        if not match:
            continue
        name, labels, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        found = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                 for k, v in _LABEL_RE.findall(labels or "")}
        yield name, found, value


def summarize(texts: Iterable[str]) -> dict[str, Any]:
    """Requests, 5xx answers, latency buckets, waiting requests ("queued", now) and open
    realtime sessions ("sessions", now) per model; requests per backend."""
    models: dict[str, dict[str, Any]] = {}
    backends: dict[str, dict[str, float]] = {}
    for text in texts:
        for name, labels, value in parse(text):
            model = labels.get("model", "")
            if not model:  # refused before a model was known
                continue
            if name in (WEIGHT, CIRCUIT) and labels.get("backend"):
                _gauge(backends.setdefault(labels["backend"],
                                           {"requests": 0.0, "errors": 0.0}), name, value)
                continue
            entry = models.setdefault(model, {"requests": 0.0, "errors": 0.0, "buckets": {},
                                              "queued": 0.0, "sessions": 0.0})
            if name == QUEUE_DEPTH:
                entry["queued"] += value   # summed over classes and gateways
            elif name == SESSIONS:
                entry["sessions"] += value   # summed over gateways
            elif name == REQUESTS:
                entry["requests"] += value
                status = labels.get("status", "")
                is_error = status.isdigit() and int(status) >= 500
                if is_error:
                    entry["errors"] += value
                backend = labels.get("backend", "")
                if backend:
                    b = backends.setdefault(backend, {"requests": 0.0, "errors": 0.0})
                    b["requests"] += value
                    b["errors"] += value if is_error else 0.0
            elif name == DURATION_BUCKET and "le" in labels:
                le = labels["le"]
                entry["buckets"][le] = entry["buckets"].get(le, 0.0) + value
    for entry in models.values():
        # [[upper bound, cumulative count]], ascending; JSON has no Infinity: +Inf → null
        ordered = sorted(entry["buckets"].items(), key=lambda kv: _bound(kv[0]))
        entry["buckets"] = [[None if math.isinf(_bound(le)) else _bound(le), count]
                            for le, count in ordered]
    return {"models": models, "backends": backends}


def _gauge(entry: dict[str, Any], name: str, value: float) -> None:
    """Gauges from several gateways: the lowest weight and the worst circuit win, so
    the page shows trouble that any gateway sees."""
    if name == WEIGHT:
        entry["weight"] = min(value, entry.get("weight", value))
    else:
        code = max(int(value), entry.get("circuit_code", 0))
        entry["circuit_code"], entry["circuit"] = code, CIRCUIT_NAMES.get(code, str(code))


def _bound(le: str) -> float:
    try:
        return float(le)
    except ValueError:
        return math.inf


def scrape(client: GatewayClient, gateways: dict[str, str], timeout: float = 1.5
           ) -> tuple[list[str], dict[str, str]]:
    """Fetch /metrics from each {name: internal_url}, in parallel. Returns the texts that
    came back and, per gateway that did not answer, why."""
    texts, errors = [], {}
    if not gateways:
        return texts, errors
    with ThreadPoolExecutor(max_workers=min(8, len(gateways))) as pool:
        futures = {name: pool.submit(client.metrics, url, timeout)
                   for name, url in gateways.items()}
        for name, future in futures.items():
            try:
                texts.append(future.result())
            except GatewayError as exc:
                errors[name] = str(exc)
    return texts, errors
