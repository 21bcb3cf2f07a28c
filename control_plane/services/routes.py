"""Routes: a public model name split between versions (target models), with
conditions on consumer attributes. A route and its versions are written together,
in one transaction that bumps the config version, and audited as one resource whose
state includes its versions.

Input versions (already shape-checked by the API): [{"model": <name>, "percent":
0..100, "conditions": [{"attr", "op", "value"}]}]. Versions without conditions split
the traffic: their percents must add up to 100.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from control_plane.services import audit
from control_plane.services.errors import Invalid
from control_plane.services.resources import Resource
from control_plane.tables.config import Model, Route, RouteVersion

log = logging.getLogger(__name__)

LABEL = "route"


def split_total(versions: Sequence[Mapping[str, Any]]) -> int:
    return sum(v["percent"] for v in versions if not v.get("conditions"))


def state(route: Route) -> dict[str, Any]:
    """The route's columns and its versions, as the audit trail keeps them."""
    out = audit.state(route)
    out["versions"] = [{"model_id": v.model_id, "model": v.model.name if v.model else None,
                        "percent": v.percent, "conditions": v.conditions}
                       for v in route.versions]
    return out


class Routes(Resource[Route]):
    model = Route
    label = LABEL

    def list(self, session: Session, **filters: Any) -> list[Route]:
        return list(session.scalars(
            select(Route).order_by(Route.id)
            .options(selectinload(Route.versions).selectinload(RouteVersion.model))))

    def _versions(self, session: Session, versions: Sequence[Mapping[str, Any]]
                  ) -> list[RouteVersion]:
        """Rows for `versions`; Invalid naming the first version whose model is unknown,
        or the versions when the split does not add up to 100."""
        names = {v["model"] for v in versions}
        ids = {name: id for name, id in
               session.execute(select(Model.name, Model.id).where(Model.name.in_(names)))}
        for i, v in enumerate(versions):
            if v["model"] not in ids:
                raise Invalid({"versions": f"[{i}].model {v['model']!r} is not a model"})
        total = split_total(versions)
        if total != 100:
            raise Invalid({"versions": "the percents of the versions without conditions "
                                       f"add up to {total}; they must add up to 100"})
        return [RouteVersion(position=i, model_id=ids[v["model"]], percent=v["percent"],
                             conditions=list(v.get("conditions") or []))
                for i, v in enumerate(versions)]

    def create(self, session: Session, data: Mapping[str, Any]) -> Route:
        data = dict(data)
        with self._writing(session, data):
            route = Route(**{k: v for k, v in data.items() if k != "versions"})
            route.versions = self._versions(session, data["versions"])
            session.add(route)
            session.flush()
            session.refresh(route)
            self._changed(session)
            audit.record(session, "create", LABEL, route.id, None, state(route))
        return route

    def update(self, session: Session, id: int, data: Mapping[str, Any]) -> Route:
        with self._writing(session, data):
            route = self.get(session, id)
            before = state(route)
            for field, value in data.items():
                if field != "versions":
                    setattr(route, field, value)
            if "versions" in data:
                route.versions = []
                session.flush()   # old positions go before new ones take them
                route.versions = self._versions(session, data["versions"])
            session.flush()
            session.refresh(route)
            after = state(route)
            if after != before:
                self._changed(session)
                audit.record(session, "update", LABEL, route.id, before, after)
        return route

    def delete(self, session: Session, id: int) -> None:
        with self._writing(session, {}):
            route = self.get(session, id)
            before = state(route)
            session.delete(route)
            session.flush()
            self._changed(session)
            audit.record(session, "delete", LABEL, id, before, None)


ROUTES = Routes()


def snapshot_section(session: Session, models: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot's "routes": enabled routes, versions whose model is in `models`
    (the enabled ones). A disabled version's share goes to the others (the gateway
    splits relative to the sum); a route left with no share at all is left out."""
    out: dict[str, Any] = {}
    for route in ROUTES.list(session):
        if not route.enabled:
            continue
        versions = [{"model": v.model.name, "percent": v.percent,
                     **({"conditions": v.conditions} if v.conditions else {})}
                    for v in route.versions if v.model.name in models]
        if split_total(versions) <= 0:
            log.warning("route %s left out of the snapshot: none of its split versions "
                        "has an enabled model", route.name)
            continue
        out[route.name] = {"id": route.id, "sticky": route.sticky, "versions": versions}
    return out
