"""Backend readiness as the controller's health checks last saw it
(control_plane/controller/health_loop.py writes it), for the admin API."""
from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.tables.config import Backend, Model
from control_plane.tables.records import BackendHealth

# what a model shows: its best backend's state
ORDER = ("ready", "loading", "unreachable", "unknown")


def report(session: Session) -> dict[str, Any]:
    """Every enabled backend's state (`unknown` when never checked, e.g. vendor
    backends) and each enabled model's best state."""
    rows = session.execute(
        select(Backend, Model.name, BackendHealth)
        .join(Model, Backend.model_id == Model.id)
        .outerjoin(BackendHealth, BackendHealth.backend_id == Backend.id)
        .where(Backend.enabled, Model.enabled)
        .order_by(Backend.id)).all()
    backends, models = [], {}
    for backend, model, health in rows:
        state = health.state if health else "unknown"
        backends.append({
            "backend_id": backend.id, "backend": backend.name, "model": model,
            "state": state, "detail": health.detail if health else "",
            "since": health.since.isoformat(timespec="seconds").replace("+00:00", "Z")
            if health else None})
        best = models.get(model, "unknown")
        models[model] = min(best, state, key=ORDER.index)
    return {"backends": backends, "models": models}
