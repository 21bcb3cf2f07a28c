"""Telemetry endpoints: agents POST reports; operators read latest values and history.

    POST /api/v1/telemetry                      agent token (or admin token)
    GET  /api/v1/telemetry                      latest per GPU, with staleness
    GET  /api/v1/telemetry/gpus/<id>/history    samples of the last ?seconds= (max 600)
    GET  /api/v1/telemetry/scrapes              latest Prometheus scrape per backend
    GET  /api/v1/telemetry/scrapes/<backend id>/history
    GET  /api/v1/telemetry/affinity             class-bound models: who serves, who not
"""
from __future__ import annotations

import math
import re
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from control_plane.api.errors import ApiError
from control_plane.api.validation import ValidationError, described
from control_plane.services import affinity, scrapes, telemetry
from control_plane.services.telemetry import GpuReading, gpu_class
from control_plane.tables.config import NAME_PATTERN, Backend
from control_plane.tables.records import Gpu

MAX_GPUS_PER_REPORT = 64
SOURCES = ("nvml", "simulated")

_NAME_RE = re.compile(NAME_PATTERN)
HOST_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$"
_HOST_RE = re.compile(HOST_PATTERN)


def _int(v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"must be an integer in {lo}..{hi}")
    return v


def _num(v: Any, lo: float, hi: float) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) \
            or not lo <= v <= hi:
        raise ValueError(f"must be null or a number in {lo}..{hi}")
    return float(v)


def _text(v: Any, max_len: int) -> str:
    if not isinstance(v, str) or not v.strip() or len(v) > max_len:
        raise ValueError(f"must be a non-empty string of at most {max_len} characters")
    return v.strip()


def parse_report(data: Any) -> tuple[str, str, list[GpuReading]]:
    """Validate a report; raises ValidationError naming every bad field."""
    if not isinstance(data, dict):
        raise ValidationError({}, "request body must be a JSON object")
    errors: dict[str, str] = {}
    host = data.get("host")
    if not isinstance(host, str) or not _HOST_RE.match(host):
        errors["host"] = "must be a host name of [A-Za-z0-9._:-], at most 255 characters"
    source = data.get("source")
    if source not in SOURCES:
        errors["source"] = "must be one of " + ", ".join(SOURCES)
    gpus = data.get("gpus")
    readings: list[GpuReading] = []
    if not isinstance(gpus, list) or not 1 <= len(gpus) <= MAX_GPUS_PER_REPORT:
        errors["gpus"] = f"must be a list of 1..{MAX_GPUS_PER_REPORT} GPUs"
        gpus = []
    seen: set[int] = set()
    for i, g in enumerate(gpus):
        where = f"gpus[{i}]"
        if not isinstance(g, dict):
            errors[where] = "must be an object"
            continue
        try:
            fields = _reading(g, where)
        except ValidationError as exc:
            errors.update(exc.fields)
            continue
        if fields.index in seen:
            errors[f"{where}.index"] = "is reported twice"
        seen.add(fields.index)
        readings.append(fields)
    unknown = set(data) - {"host", "source", "gpus"}
    for key in unknown:
        errors[key] = "is not a known field"
    if errors:
        raise ValidationError(errors, "invalid telemetry report: " + ", ".join(sorted(errors)))
    return host, source, readings


def _int_check(lo: int, hi: int):
    return described({"type": "integer", "minimum": lo, "maximum": hi})(
        lambda v: _int(v, lo, hi))


def _num_check(lo: float, hi: float):
    return described({"type": ["number", "null"], "minimum": lo, "maximum": hi})(
        lambda v: _num(v, lo, hi))


def _text_check(max_len: int, nullable: bool = False):
    text = {"type": "string", "minLength": 1, "maxLength": max_len, "pattern": "\\S"}
    return described({"anyOf": [text, {"type": "null"}]} if nullable else text)(
        lambda v: None if v is None and nullable else _text(v, max_len))


# One GPU of a report: what each field accepts (the OpenAPI document reads these too).
READING_REQUIRED = {
    "index": _int_check(0, 1023),
    "name": _text_check(128),
    "memory_total_mb": _int_check(1, 1 << 40),
    "memory_used_mb": _int_check(0, 1 << 40),
}


@described({"type": "array", "maxItems": 64,
            "items": {"type": "string", "pattern": NAME_PATTERN, "maxLength": 128}})
def _backend_names(v: Any) -> list[str]:
    if not isinstance(v, list) or len(v) > 64 or not all(
            isinstance(n, str) and _NAME_RE.match(n) for n in v):
        raise ValueError("must be a list of backend names")
    return list(dict.fromkeys(v))


READING_OPTIONAL = {
    "uuid": _text_check(128, nullable=True),
    "gpu_class": _text_check(64, nullable=True),
    "utilization_pct": _num_check(0, 100),
    "temperature_c": _num_check(-50, 200),
    "power_w": _num_check(0, 10_000),
    "backends": _backend_names,
}


def _reading(g: dict, where: str) -> GpuReading:
    errors: dict[str, str] = {}
    out: dict[str, Any] = {}
    checks, optional = READING_REQUIRED, READING_OPTIONAL
    for key, check in {**checks, **optional}.items():
        if key not in g:
            if key in checks:
                errors[f"{where}.{key}"] = "is required"
            continue
        try:
            out[key] = check(g[key])
        except ValueError as exc:
            errors[f"{where}.{key}"] = str(exc)
    for key in set(g) - set(checks) - set(optional):
        errors[f"{where}.{key}"] = "is not a known field"
    if not errors and out["memory_used_mb"] > out["memory_total_mb"]:
        errors[f"{where}.memory_used_mb"] = "must not exceed memory_total_mb"
    if errors:
        raise ValidationError(errors)
    out["gpu_class"] = out.get("gpu_class") or gpu_class(out["name"])
    out["backends"] = tuple(out.get("backends") or ())
    return GpuReading(**out)


def register(bp: Blueprint, db, json_body) -> None:
    """Add the telemetry routes to the API blueprint."""

    @bp.post("/telemetry")
    def ingest_telemetry() -> tuple[Response, int]:
        host, source, readings = parse_report(json_body())
        return jsonify(telemetry.ingest(db(), host, source, readings)), 200

    @bp.get("/telemetry")
    def latest_telemetry() -> Response:
        stale_after = current_app.config["SLUICE_SETTINGS"].telemetry_stale_after
        return jsonify({"stale_after_s": stale_after,
                        "gpus": telemetry.latest(db(), stale_after)})

    @bp.get("/telemetry/gpus/<int:gpu_id>/history")
    def gpu_history(gpu_id: int) -> Response:
        seconds = _seconds(telemetry.HISTORY_SECONDS)
        if db().get(Gpu, gpu_id) is None:
            raise ApiError(404, f"no gpu with id {gpu_id}")
        return jsonify({"gpu_id": gpu_id, "samples": telemetry.history(db(), gpu_id, seconds)})

    @bp.get("/telemetry/scrapes")
    def latest_scrapes() -> Response:
        stale_after = current_app.config["SLUICE_SETTINGS"].telemetry_stale_after
        return jsonify({"stale_after_s": stale_after,
                        "scrapes": scrapes.latest(db(), stale_after)})

    @bp.get("/telemetry/scrapes/<int:backend_id>/history")
    def scrape_history(backend_id: int) -> Response:
        seconds = _seconds(scrapes.HISTORY_SECONDS)
        if db().get(Backend, backend_id) is None:
            raise ApiError(404, f"no backend with id {backend_id}")
        return jsonify({"backend_id": backend_id,
                        "samples": scrapes.history(db(), backend_id, seconds)})

    @bp.get("/telemetry/affinity")
    def affinity_report() -> Response:
        return jsonify({"models": affinity.report(db())})


def _seconds(limit: float) -> float:
    """The ?seconds= of a history request, 300 by default."""
    try:
        seconds = float(request.args.get("seconds", "300"))
        if not 0 < seconds <= limit:
            raise ValueError
    except ValueError:
        raise ValidationError({"seconds": f"must be a number in (0, {limit}]"},
                              "invalid query parameters") from None
    return seconds
