"""CRUD for the admin resources. Each write is one transaction; config writes bump
the config version in that same transaction, so a failed write never bumps it."""
from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar, Generic, TypeVar

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from control_plane.clients import backend_tls
from control_plane.services import audit
from control_plane.services.config_state import bump_version
from control_plane.services.errors import Conflict, Invalid, NotFound
from control_plane.tables.base import Base
from control_plane.tables.config import (ApiKey, Backend, Consumer, ContentPolicy, Gateway,
                                         JwtIssuer, Model, ModelType, Plan, Route)
from control_plane.tables.config import Mapping as MappingRow

T = TypeVar("T", bound=Base)

KEY_PREFIX_LEN = 10
DEFAULT_WEIGHT = 100
# a backend's TLS settings (models.Backend): https:// backends only
TLS_FIELDS = ("tls_verify", "tls_ca", "tls_server_name", "tls_client_cert", "tls_client_key")


def hash_key(key: str) -> str:
    """The form API keys are stored and looked up in (sha256 hex of the full key)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def generate_key() -> str:
    return "sk-" + secrets.token_urlsafe(32)


class Resource(Generic[T]):
    model: ClassVar[type]
    label: ClassVar[str]
    bumps_version: ClassVar[bool] = True
    unique_fields: ClassVar[tuple[str, ...]] = ("name",)
    filters: ClassVar[tuple[str, ...]] = ()

    def list(self, session: Session, **filters: Any) -> list[T]:
        stmt = select(self.model).order_by(self.model.id)
        for field, value in filters.items():
            if field not in self.filters:
                raise ValueError(f"cannot filter {self.label}s by {field}")
            if value is not None:
                stmt = stmt.where(getattr(self.model, field) == value)
        return list(session.scalars(stmt))

    def get(self, session: Session, id: int) -> T:
        obj = session.get(self.model, id)
        if obj is None:
            raise NotFound(f"no {self.label} with id {id}")
        return obj

    def create(self, session: Session, data: Mapping[str, Any]) -> T:
        with self._writing(session, data):
            self._check(session, data)
            obj = self.model(**data)
            session.add(obj)
            session.flush()
            self._changed(session)
            audit.record(session, "create", self.label, obj.id, None, audit.state(obj))
        return obj

    def update(self, session: Session, id: int, data: Mapping[str, Any]) -> T:
        with self._writing(session, data):
            obj = self.get(session, id)
            self._check(session, data)
            changed = {k: v for k, v in data.items() if getattr(obj, k) != v}
            if changed:
                before = audit.state(obj)
                for field, value in changed.items():
                    setattr(obj, field, value)
                self._on_update(obj, changed)
                session.flush()
                self._changed(session)
                audit.record(session, "update", self.label, obj.id, before, audit.state(obj))
        return obj

    def delete(self, session: Session, id: int) -> None:
        with self._writing(session, {}):
            obj = self.get(session, id)
            self._before_delete(session, obj)
            before = audit.state(obj)
            session.delete(obj)
            session.flush()
            self._changed(session)
            audit.record(session, "delete", self.label, id, before, None)

    # hooks for subclasses
    def _check(self, session: Session, data: Mapping[str, Any]) -> None:
        """Raise Invalid when `data` refers to rows that do not exist."""

    def _on_update(self, obj: T, changed: Mapping[str, Any]) -> None:
        pass

    def _before_delete(self, session: Session, obj: T) -> None:
        pass

    def _changed(self, session: Session) -> None:
        if self.bumps_version:
            bump_version(session)

    @contextmanager
    def _writing(self, session: Session, data: Mapping[str, Any]) -> Iterator[None]:
        try:
            yield
            session.commit()
        except IntegrityError as exc:
            session.rollback()
            raise self._conflict(exc, data) from None
        except BaseException:
            session.rollback()
            raise

    def _conflict(self, exc: IntegrityError, data: Mapping[str, Any]) -> Conflict:
        diag = getattr(exc.orig, "diag", None)
        constraint = getattr(diag, "constraint_name", None)
        for field in self.unique_fields:
            if constraint == f"uq_{self.model.__tablename__}_{field}":
                value = data.get(field)
                return Conflict(f"a {self.label} with {field} {value!r} already exists")
        if getattr(exc.orig, "pgcode", None) == "23503":
            return Conflict(f"this {self.label} is still referenced by other resources")
        return Conflict(f"this {self.label} conflicts with existing data ({constraint})")


def _require_row(session: Session, model: type, id: int | None, field: str,
                 label: str) -> None:
    if id is not None and session.get(model, id) is None:
        raise Invalid({field: f"no {label} with id {id}"})


class Models(Resource[Model]):
    model = Model
    label = "model"

    def create(self, session: Session, data: Mapping[str, Any]) -> Model:
        self._check_fallback(session, data.get("name"), data.get("fallback_model"))
        return super().create(session, data)

    def update(self, session: Session, id: int, data: Mapping[str, Any]) -> Model:
        if data.get("fallback_model") is not None:
            name = data.get("name", self.get(session, id).name)
            self._check_fallback(session, name, data["fallback_model"])
        return super().update(session, id, data)

    def _check_fallback(self, session: Session, name: str | None,
                        fallback: str | None) -> None:
        if fallback is None:
            return
        if fallback == name:
            raise Invalid({"fallback_model": "must name another model"})
        if session.scalar(select(Model.id).where(Model.name == fallback)) is None:
            raise Invalid({"fallback_model": f"no model named {fallback!r}"})

    def _before_delete(self, session: Session, obj: Model) -> None:
        users = list(session.scalars(select(Model.name)
                                     .where(Model.fallback_model == obj.name)))
        if users:
            raise Conflict(f"model {obj.name!r} is the fallback of {', '.join(users)}; "
                           "change their fallback_model first")
        count = session.scalar(select(func.count()).select_from(Backend)
                               .where(Backend.model_id == obj.id))
        if count:
            raise Conflict(f"model {obj.name!r} still has {count} backend(s); "
                           "delete them or move them to another model first")


class Backends(Resource[Backend]):
    model = Backend
    label = "backend"
    filters = ("model_id",)

    def _check(self, session: Session, data: Mapping[str, Any]) -> None:
        _require_row(session, Model, data.get("model_id"), "model_id", "model")
        _require_row(session, MappingRow, data.get("mapping_id"), "mapping_id", "mapping")

    def _consistent(self, protocol: str, mapping_id: int | None) -> None:
        if protocol == "vendor" and mapping_id is None:
            raise Invalid({"mapping_id": "is required for a vendor backend"})
        if protocol != "vendor" and mapping_id is not None:
            raise Invalid({"mapping_id": "only vendor backends have a mapping"})

    @staticmethod
    def _metrics_pair(url: str | None, fmt: str | None) -> None:
        if url is None and fmt is not None:
            raise Invalid({"metrics_url": "is required when metrics_format is set "
                                          "(clear both to stop scraping)"})
        if fmt is None and url is not None:
            raise Invalid({"metrics_format": "is required when metrics_url is set"})

    @staticmethod
    def _tls(url: str, tls: Mapping[str, Any], changed: Mapping[str, Any]) -> None:
        """TLS settings only on https:// backends (tls_verify alone is let be: a form's
        checkbox always sends it, and it means nothing over http); a client
        certificate comes with its key. `tls` holds the values after the change,
        `changed` what the request set (the field a problem is reported on)."""
        set_fields = [f for f in TLS_FIELDS if f != "tls_verify" and tls.get(f) is not None]
        if not url.startswith("https://") and set_fields:
            field = next((f for f in set_fields if f in changed), "url")
            raise Invalid({field: "applies to https:// backends only"
                           if field != "url" else "must be https:// while TLS settings "
                           "(" + ", ".join(set_fields) + ") are set"})
        cert, key = tls.get("tls_client_cert"), tls.get("tls_client_key")
        if (cert is None) != (key is None):
            missing = "tls_client_key" if key is None else "tls_client_cert"
            raise Invalid({missing: "is required with " + ("tls_client_cert" if key is None
                                                            else "tls_client_key")})
        if cert is not None and not backend_tls.key_matches(cert, key):
            raise Invalid({"tls_client_key": "is not the key of tls_client_cert"})
        if tls.get("tls_verify") is False and tls.get("tls_ca") is not None:
            raise Invalid({"tls_ca" if "tls_ca" in changed else "tls_verify":
                           "tls_ca has no use while tls_verify is false"})
        ip = backend_tls.ip_host(url)
        if (ip and tls.get("tls_verify") is not False and tls.get("tls_server_name") is None
                and {"url", "tls_verify", "tls_server_name"} & set(changed)):
            raise Invalid({"url": f"is addressed by IP ({ip}), and the gateway verifies "
                           "certificates by DNS name only (an IP SAN is never matched): set "
                           "tls_server_name to a DNS name the backend's certificate carries "
                           "(issue it with a DNS SAN too)"})

    def create(self, session: Session, data: Mapping[str, Any]) -> Backend:
        self._consistent(data["protocol"], data.get("mapping_id"))
        self._metrics_pair(data.get("metrics_url"), data.get("metrics_format"))
        self._tls(data["url"], data, data)
        return super().create(session, data)

    def update(self, session: Session, id: int, data: Mapping[str, Any]) -> Backend:
        current = self.get(session, id)
        self._consistent(data.get("protocol", current.protocol),
                         data["mapping_id"] if "mapping_id" in data else current.mapping_id)
        self._metrics_pair(*(data[f] if f in data else getattr(current, f)
                             for f in ("metrics_url", "metrics_format")))
        self._tls(data.get("url", current.url),
                  {f: data[f] if f in data else getattr(current, f) for f in TLS_FIELDS},
                  data)
        return super().update(session, id, data)

    def _on_update(self, obj: Backend, changed: Mapping[str, Any]) -> None:
        if "weight" in changed and "drained_weight" not in changed:
            obj.drained_weight = None  # a weight set by hand ends the drain

    def drain(self, session: Session, id: int) -> Backend:
        """Weight 0, remembering the weight to restore; draining twice changes nothing."""
        obj = self.get(session, id)
        if obj.weight == 0:
            return obj
        return self.update(session, id, {"weight": 0, "drained_weight": obj.weight})

    def restore(self, session: Session, id: int) -> Backend:
        """Back to the weight it had before `drain` (100 when that is unknown)."""
        obj = self.get(session, id)
        if obj.weight != 0:
            return obj
        return self.update(session, id, {"weight": obj.drained_weight or DEFAULT_WEIGHT,
                                         "drained_weight": None})


class Mappings(Resource[MappingRow]):
    model = MappingRow
    label = "mapping"

    def _before_delete(self, session: Session, obj: MappingRow) -> None:
        count = session.scalar(select(func.count()).select_from(Backend)
                               .where(Backend.mapping_id == obj.id))
        if count:
            raise Conflict(f"mapping {obj.name!r} is used by {count} backend(s)")


class ModelTypes(Resource[ModelType]):
    """`model_type` -> the model or route that serves it (brief 000's envelope)."""
    model = ModelType
    label = "model type"
    unique_fields = ("model_type",)

    def _check(self, session: Session, data: Mapping[str, Any]) -> None:
        target = data.get("target")
        if target is None:
            return
        found = session.scalar(select(Model.id).where(Model.name == target)) or \
            session.scalar(select(Route.id).where(Route.name == target))
        if found is None:
            raise Invalid({"target": f"no model or route named {target!r}"})


class Consumers(Resource[Consumer]):
    model = Consumer
    label = "consumer"
    filters = ("plan_id",)

    def _check(self, session: Session, data: Mapping[str, Any]) -> None:
        _require_row(session, Plan, data.get("plan_id"), "plan_id", "plan")


class Plans(Resource[Plan]):
    model = Plan
    label = "plan"

    def _before_delete(self, session: Session, obj: Plan) -> None:
        count = session.scalar(select(func.count()).select_from(Consumer)
                               .where(Consumer.plan_id == obj.id))
        if count:
            raise Conflict(f"plan {obj.name!r} still has {count} consumer(s); "
                           "move them to another plan first")


class ContentPolicies(Resource[ContentPolicy]):
    model = ContentPolicy
    label = "content policy"


class JwtIssuers(Resource[JwtIssuer]):
    model = JwtIssuer
    label = "JWT issuer"


class ApiKeys(Resource[ApiKey]):
    model = ApiKey
    label = "key"
    unique_fields = ("key_hash",)
    filters = ("consumer_id",)

    def _check(self, session: Session, data: Mapping[str, Any]) -> None:
        _require_row(session, Consumer, data.get("consumer_id"), "consumer_id", "consumer")

    def create_with_key(self, session: Session, data: Mapping[str, Any],
                        key: str | None = None) -> tuple[ApiKey, str]:
        """Create a key; return the row and the plain key, which is never stored.

        `key` lets seeding code choose a known key (demos, tests); otherwise one is
        generated.
        """
        key = key or generate_key()
        row = self.create(session, {**data, "key_hash": hash_key(key),
                                    "prefix": key[:KEY_PREFIX_LEN]})
        return row, key


class Gateways(Resource[Gateway]):
    # Gateways are not part of the snapshot: writing them does not bump the version.
    model = Gateway
    label = "gateway"
    bumps_version = False
    unique_fields = ("name",)

    def create(self, session: Session, data: Mapping[str, Any]) -> Gateway:
        self._url_free(session, data.get("internal_url"), None)
        return super().create(session, data)

    def update(self, session: Session, id: int, data: Mapping[str, Any]) -> Gateway:
        self._url_free(session, data.get("internal_url"), id)
        return super().update(session, id, data)

    def _url_free(self, session: Session, url: str | None, own_id: int | None) -> None:
        # Not a database constraint: a member that left keeps its row and its address,
        # which a new member may take (services/membership.py).
        if url is None:
            return
        taken = session.scalar(select(Gateway.id).where(
            Gateway.internal_url == url, Gateway.left_at.is_(None),
            Gateway.id != (own_id or 0)).limit(1))
        if taken is not None:
            session.rollback()
            raise Conflict(f"a gateway with internal_url {url!r} already exists")

    def _on_update(self, obj: Gateway, changed: Mapping[str, Any]) -> None:
        if "internal_url" in changed:
            # A different listener: we no longer know what it serves.
            obj.acked_version = None
            obj.last_error = None


MODELS = Models()
BACKENDS = Backends()
MAPPINGS = Mappings()
MODEL_TYPES = ModelTypes()
CONSUMERS = Consumers()
PLANS = Plans()
JWT_ISSUERS = JwtIssuers()
CONTENT_POLICIES = ContentPolicies()
KEYS = ApiKeys()
GATEWAYS = Gateways()
