"""GPU telemetry: ingest agent reports, keep the latest values and a short history,
and tell the weight computation how much memory each backend's GPUs have free.

A report (POST /api/v1/telemetry, sent by `sluice agent`)::

    {"host": "gpu-1", "source": "nvml",
     "gpus": [{"index": 0, "uuid": "GPU-…", "name": "NVIDIA A100-SXM4-80GB",
               "gpu_class": "A100", "memory_total_mb": 81920, "memory_used_mb": 20480,
               "utilization_pct": 37.0, "temperature_c": 51.0, "power_w": 210.5,
               "backends": ["llama-a"]}]}

A GPU is stale when its last report is older than `stale_after` seconds; stale
readings are shown as such and never used to drain a backend (services/weights.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from control_plane.services import affinity
from control_plane.services.config_state import bump_version
from control_plane.tables.config import Backend
from control_plane.tables.records import Gpu, GpuSample

HISTORY_SECONDS = 600          # samples older than this are trimmed on ingest
DEFAULT_STALE_AFTER = 15.0     # seconds without a report before a GPU is stale
_CLASS_PREFIXES = ("NVIDIA", "Tesla", "GeForce", "Quadro")
_CLASS_JOIN = ("RTX", "GTX", "TITAN")


def gpu_class(device_name: str) -> str:
    """The GPU class of an NVML device name: "NVIDIA A100-SXM4-80GB" -> "A100",
    "Tesla T4" -> "T4", "NVIDIA GeForce RTX 4090" -> "RTX4090"."""
    words = [w for w in re.split(r"[\s_]+", device_name.strip()) if w]
    while words and words[0] in _CLASS_PREFIXES:
        words.pop(0)
    if not words:
        return "unknown"
    first = words[0].split("-")[0]
    if first.upper() in _CLASS_JOIN and len(words) > 1:
        first += words[1].split("-")[0]
    return first[:64] or "unknown"


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str
    gpu_class: str
    memory_total_mb: int
    memory_used_mb: int
    uuid: str | None = None
    utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    backends: tuple[str, ...] = ()


def ingest(session: Session, host: str, source: str, readings: list[GpuReading],
           now: datetime | None = None) -> dict[str, Any]:
    """Store one report: upsert the latest values, append to the history, trim it.

    Returns what the agent is told back: how many GPUs were taken and which backend
    names in its mapping match no backend (a typo in the agent's config). When the
    report changes the GPU classes of a class-bound model's backends, the config
    version is bumped in the same transaction (services/affinity.py).
    """
    now = now or datetime.now(timezone.utc)
    try:
        classes_before = affinity.bound_fingerprint(session)
        existing = {g.gpu_index: g for g in session.scalars(
            select(Gpu).where(Gpu.host == host))}
        ids = []
        for r in readings:
            row = existing.get(r.index)
            if row is None:
                row = Gpu(host=host, gpu_index=r.index)
                session.add(row)
            row.uuid, row.name, row.gpu_class = r.uuid, r.name, r.gpu_class
            row.backends, row.source = list(r.backends), source
            row.memory_total_mb, row.memory_used_mb = r.memory_total_mb, r.memory_used_mb
            row.utilization_pct, row.temperature_c, row.power_w = (
                r.utilization_pct, r.temperature_c, r.power_w)
            row.reported_at = now
            session.flush()
            ids.append(row.id)
            session.add(GpuSample(gpu_id=row.id, at=now, memory_total_mb=r.memory_total_mb,
                                  memory_used_mb=r.memory_used_mb,
                                  utilization_pct=r.utilization_pct,
                                  temperature_c=r.temperature_c, power_w=r.power_w))
        session.execute(delete(GpuSample).where(
            GpuSample.gpu_id.in_(ids),
            GpuSample.at < now - timedelta(seconds=HISTORY_SECONDS)))
        names = {n for r in readings for n in r.backends}
        known = set(session.scalars(select(Backend.name).where(Backend.name.in_(names)))) \
            if names else set()
        if affinity.changed(classes_before, affinity.bound_fingerprint(session)):
            bump_version(session)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return {"accepted": len(readings), "unknown_backends": sorted(names - known)}


def is_stale(gpu: Gpu, now: datetime, stale_after: float) -> bool:
    return (now - gpu.reported_at).total_seconds() > stale_after


def render_gpu(gpu: Gpu, now: datetime, stale_after: float) -> dict[str, Any]:
    age = (now - gpu.reported_at).total_seconds()
    return {"id": gpu.id, "host": gpu.host, "index": gpu.gpu_index, "uuid": gpu.uuid,
            "name": gpu.name, "gpu_class": gpu.gpu_class, "backends": gpu.backends,
            "source": gpu.source, "memory_total_mb": gpu.memory_total_mb,
            "memory_used_mb": gpu.memory_used_mb,
            "memory_free_mb": gpu.memory_total_mb - gpu.memory_used_mb,
            "utilization_pct": gpu.utilization_pct, "temperature_c": gpu.temperature_c,
            "power_w": gpu.power_w,
            "reported_at": gpu.reported_at.astimezone(timezone.utc).isoformat(),
            "age_s": round(age, 3), "stale": age > stale_after}


def latest(session: Session, stale_after: float) -> list[dict[str, Any]]:
    now = datetime.now(timezone.utc)
    return [render_gpu(g, now, stale_after)
            for g in session.scalars(select(Gpu).order_by(Gpu.host, Gpu.gpu_index))]


def history(session: Session, gpu_id: int, seconds: float) -> list[dict[str, Any]]:
    since = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    rows = session.scalars(select(GpuSample).where(GpuSample.gpu_id == gpu_id,
                                                   GpuSample.at >= since)
                           .order_by(GpuSample.at))
    return [{"at": s.at.astimezone(timezone.utc).isoformat(),
             "memory_total_mb": s.memory_total_mb, "memory_used_mb": s.memory_used_mb,
             "utilization_pct": s.utilization_pct, "temperature_c": s.temperature_c,
             "power_w": s.power_w} for s in rows]


def model_utilization(session: Session, stale_after: float,
                      now: datetime | None = None) -> dict[str, float]:
    """Mean GPU utilisation (0..1) per model name, over the fresh GPUs that serve its
    enabled backends; models with no fresh GPU reading are absent (unknown)."""
    now = now or datetime.now(timezone.utc)
    model_of = {b.name: b.model.name for b in session.scalars(
        select(Backend).where(Backend.enabled))}
    readings: dict[str, list[float]] = {}
    for gpu in session.scalars(select(Gpu)):
        if gpu.utilization_pct is None or is_stale(gpu, now, stale_after):
            continue
        for name in {model_of[b] for b in gpu.backends or () if b in model_of}:
            readings.setdefault(name, []).append(gpu.utilization_pct / 100.0)
    return {name: sum(v) / len(v) for name, v in readings.items()}


@dataclass(frozen=True)
class BackendMemory:
    free_fraction: float    # free / total over the fresh GPUs that serve the backend
    gpu_classes: frozenset[str]


def backend_memory(session: Session, stale_after: float,
                   now: datetime | None = None) -> dict[str, BackendMemory]:
    """Free-memory fraction per backend name, from fresh GPUs only.

    A backend on several GPUs gets their pooled fraction (sum free / sum total). A
    backend none of whose GPUs reported recently is absent: the weight formula then
    treats its memory as unknown, not as full.
    """
    now = now or datetime.now(timezone.utc)
    totals: dict[str, list[int]] = {}
    classes: dict[str, set[str]] = {}
    for gpu in session.scalars(select(Gpu)):
        if is_stale(gpu, now, stale_after):
            continue
        for name in gpu.backends or ():
            t = totals.setdefault(name, [0, 0])
            t[0] += gpu.memory_total_mb - gpu.memory_used_mb
            t[1] += gpu.memory_total_mb
            classes.setdefault(name, set()).add(gpu.gpu_class)
    return {name: BackendMemory(free / total if total else 0.0, frozenset(classes[name]))
            for name, (free, total) in totals.items()}
