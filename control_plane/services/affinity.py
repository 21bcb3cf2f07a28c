"""GPU-class affinity: a model may require a GPU class ("A100"); only its backends
on GPUs of that class serve it.

A backend's GPU classes are, in order:

1. its declared `gpu_class` (for hosts without an agent; it wins over reports);
2. else the classes of every GPU whose agent report lists it (`gpus.backends`),
   however old the report: a GPU's class does not go stale when its agent goes quiet;
3. else none: unknown.

A backend is eligible for a model that requires class C when it has classes and all
of them are C (a backend spread over an A100 and a T4 runs at the T4's pace). An
unknown backend is NOT eligible: the requirement is a hard one, and a backend nobody
vouched for may sit on any GPU. Classes compare case-insensitively.

Ineligible backends are left out of the snapshot (services/snapshot.py), so no weight
push, decay or controller outage can send traffic to them. Reports change what is
eligible without an admin write, so telemetry ingest bumps the config version when
the classes of a backend that serves a class-bound model change (`changed`).
"""
from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from control_plane.tables.config import Backend, Model
from control_plane.tables.records import Gpu


def reported_classes(session: Session) -> dict[str, frozenset[str]]:
    """GPU classes per backend name, from every GPU row that lists the backend."""
    out: dict[str, set[str]] = {}
    for backends, cls in session.execute(select(Gpu.backends, Gpu.gpu_class)):
        for name in backends or ():
            out.setdefault(name, set()).add(cls)
    return {name: frozenset(c) for name, c in out.items()}


def classes_of(backend: Backend, reported: Mapping[str, frozenset[str]]) -> frozenset[str]:
    if backend.gpu_class:
        return frozenset((backend.gpu_class,))
    return reported.get(backend.name, frozenset())


def eligible(model: Model, backend: Backend, reported: Mapping[str, frozenset[str]]) -> bool:
    if not model.gpu_class:
        return True
    classes = classes_of(backend, reported)
    want = model.gpu_class.casefold()
    return bool(classes) and all(c.casefold() == want for c in classes)


def bound_fingerprint(session: Session) -> dict[str, frozenset[str]]:
    """Reported classes of the backends whose model requires a class: what the
    snapshot depends on. Compare before and after an ingest with `changed`."""
    names = set(session.scalars(select(Backend.name).join(Model)
                                .where(Model.gpu_class.is_not(None))))
    if not names:
        return {}
    reported = reported_classes(session)
    return {n: reported.get(n, frozenset()) for n in names}


def changed(before: Mapping[str, frozenset[str]], after: Mapping[str, frozenset[str]]) -> bool:
    return dict(before) != dict(after)


def report(session: Session) -> list[dict]:
    """Per class-bound model, each backend's classes and whether it may serve."""
    reported = reported_classes(session)
    out = []
    for model in session.scalars(select(Model).where(Model.gpu_class.is_not(None))
                                 .order_by(Model.id).options(selectinload(Model.backends))):
        out.append({"model": model.name, "gpu_class": model.gpu_class, "backends": [
            {"backend": b.name, "declared": b.gpu_class,
             "reported": sorted(reported.get(b.name, ())),
             "eligible": eligible(model, b, reported)} for b in model.backends]})
    return out
