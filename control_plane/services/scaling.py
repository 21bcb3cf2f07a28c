"""Scaling signals per model, from what the gateways logged (inference_logs) and,
where known, GPU utilisation:

- **down** when a model had fewer than `down_requests_per_minute` requests in the
  window AND its GPUs were under `down_gpu_utilization` busy;
- **up** when its requests/s reached `up_requests_per_second` AND its p99 latency
  reached `up_p99_ms`;
- **hold** otherwise, with the reason.

Without GPU telemetry a model is never told to scale down (an idle-looking model may
be loading or saturated on its GPU); `gpu_utilization` is null then.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from control_plane.settings import Settings
from control_plane.tables.config import Model
from control_plane.tables.records import InferenceLog


@dataclass(frozen=True)
class Thresholds:
    window_seconds: float = 60.0
    down_requests_per_minute: float = 10.0
    down_gpu_utilization: float = 0.15
    up_requests_per_second: float = 50.0
    up_p99_ms: float = 2000.0


def thresholds(settings: Settings) -> Thresholds:
    """The thresholds SLUICE_SCALE_* set."""
    return Thresholds(window_seconds=settings.scale_window,
                      down_requests_per_minute=settings.scale_down_rpm,
                      down_gpu_utilization=settings.scale_down_gpu,
                      up_requests_per_second=settings.scale_up_rps,
                      up_p99_ms=settings.scale_up_p99_ms)


# model name -> mean GPU utilisation 0..1 of the GPUs serving it (None: unknown)
GpuSource = Callable[[Session], Mapping[str, float | None]]


def no_gpu_telemetry(_session: Session) -> Mapping[str, float | None]:
    return {}


def recommend(session: Session, t: Thresholds, gpu: GpuSource = no_gpu_telemetry,
              now: datetime | None = None) -> list[dict[str, Any]]:
    """One recommendation per enabled model, sorted by name."""
    until = now or datetime.now(timezone.utc)
    since = until - timedelta(seconds=t.window_seconds)
    rows = session.execute(
        select(InferenceLog.model_name, func.count().label("n"),
               func.percentile_cont(0.99).within_group(InferenceLog.latency).label("p99"))
        .where(InferenceLog.ts >= since, InferenceLog.ts < until,
               InferenceLog.model_name.is_not(None))
        .group_by(InferenceLog.model_name))
    seen = {r.model_name: (r.n, r.p99) for r in rows}
    names = session.scalars(select(Model.name).where(Model.enabled).order_by(Model.name))
    utilization = gpu(session)
    out = []
    for name in names:
        n, p99 = seen.get(name, (0, None))
        rps = n / t.window_seconds
        rpm = rps * 60
        util = utilization.get(name)
        if rps >= t.up_requests_per_second and p99 is not None and p99 >= t.up_p99_ms:
            action, reason = "up", (f"{rps:.1f} req/s >= {t.up_requests_per_second:g} and "
                                    f"p99 {p99:.0f} ms >= {t.up_p99_ms:g} ms")
        elif rpm < t.down_requests_per_minute and util is not None \
                and util < t.down_gpu_utilization:
            action, reason = "down", (f"{rpm:.1f} req/min < {t.down_requests_per_minute:g} "
                                      f"and GPU {util:.0%} < {t.down_gpu_utilization:.0%}")
        elif rpm < t.down_requests_per_minute and util is None:
            action, reason = "hold", "little traffic, but no GPU telemetry to confirm idling"
        else:
            action, reason = "hold", "within thresholds"
        out.append({"model": name, "action": action, "reason": reason,
                    "requests_per_second": round(rps, 3),
                    "requests_per_minute": round(rpm, 2),
                    "p99_ms": None if p99 is None else round(float(p99), 1),
                    "gpu_utilization": util})
    return out
