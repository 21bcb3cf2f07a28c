"""The GPU telemetry gauges the controller exports (cp_metrics): each GPU's report
age, and the utilisation and free memory of each GPU per backend it serves. A stale
reading is not today's load: its series are left out, only its age stays."""
from __future__ import annotations

from typing import Any

from control_plane.controller import cp_metrics


def publish(gpus: list[dict[str, Any]]) -> None:
    """Replace the telemetry series with those of `gpus` (services.telemetry.latest)."""
    for gauge in (cp_metrics.TELEMETRY_AGE, cp_metrics.GPU_UTILIZATION,
                  cp_metrics.GPU_MEMORY_FREE):
        gauge.clear()
    for g in gpus:
        cp_metrics.TELEMETRY_AGE.labels(g["host"], str(g["index"]),
                                        g["gpu_class"]).set(g["age_s"])
        if g["stale"]:
            continue
        for backend in g["backends"] or ():
            labels = (g["host"], str(g["index"]), backend)
            if g["utilization_pct"] is not None:
                cp_metrics.GPU_UTILIZATION.labels(*labels).set(g["utilization_pct"] / 100)
            if g["memory_total_mb"]:
                cp_metrics.GPU_MEMORY_FREE.labels(*labels).set(
                    g["memory_free_mb"] / g["memory_total_mb"])
    cp_metrics.TELEMETRY_STALE.set(sum(1 for g in gpus if g["stale"]))
