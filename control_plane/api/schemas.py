"""What each resource accepts (validation schemas) and how it is shown (render)."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from control_plane.api import validation as v
from control_plane.api.validation import Field
from control_plane.models import (MAX_WEIGHT, PROTOCOLS, ApiKey, Backend, Consumer,
                                  Gateway, Model)

MAX_TIMEOUT_MS = 3_600_000
COMMON_READ_ONLY = ("id", "created_at", "updated_at")


def iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    return dt.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


class Schema:
    """Create and update rules of one resource plus its JSON rendering."""
    create: dict[str, Field]
    update: dict[str, Field]
    read_only: tuple[str, ...] = COMMON_READ_ONLY

    def render(self, obj: Any) -> dict[str, Any]:
        raise NotImplementedError


class ModelSchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "timeout_ms": Field(v.integer(1, MAX_TIMEOUT_MS)),
        "enabled": Field(v.boolean),
    }
    update = {k: Field(f.parse) for k, f in create.items()}

    def render(self, m: Model) -> dict[str, Any]:
        return {"id": m.id, "name": m.name, "timeout_ms": m.timeout_ms,
                "enabled": m.enabled, "created_at": iso(m.created_at),
                "updated_at": iso(m.updated_at)}


class BackendSchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "model_id": Field(v.identifier, required=True),
        "url": Field(v.http_url(allow_path=True), required=True),
        "protocol": Field(v.one_of(*PROTOCOLS), required=True),
        "weight": Field(v.integer(0, MAX_WEIGHT)),
        "enabled": Field(v.boolean),
    }
    update = {k: Field(f.parse) for k, f in create.items()}

    def render(self, b: Backend) -> dict[str, Any]:
        return {"id": b.id, "name": b.name, "model_id": b.model_id, "url": b.url,
                "protocol": b.protocol, "weight": b.weight, "enabled": b.enabled,
                "created_at": iso(b.created_at), "updated_at": iso(b.updated_at)}


class ConsumerSchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "allowed_models": Field(v.name_list, nullable=True),
        "attributes": Field(v.attributes),
        "enabled": Field(v.boolean),
    }
    update = {k: Field(f.parse, nullable=f.nullable) for k, f in create.items()}

    def render(self, c: Consumer) -> dict[str, Any]:
        return {"id": c.id, "name": c.name, "allowed_models": c.allowed_models,
                "attributes": c.attributes,
                "enabled": c.enabled, "created_at": iso(c.created_at),
                "updated_at": iso(c.updated_at)}


class KeySchema(Schema):
    create = {
        "consumer_id": Field(v.identifier, required=True),
        "name": Field(v.text(128)),
        "enabled": Field(v.boolean),
        "expires_at": Field(v.timestamp, nullable=True),
    }
    # A key stays with its consumer; issue a new key to move access.
    update = {k: f for k, f in create.items() if k != "consumer_id"}
    read_only = COMMON_READ_ONLY + ("consumer_id", "key", "key_hash", "prefix")

    def render(self, k: ApiKey) -> dict[str, Any]:
        return {"id": k.id, "consumer_id": k.consumer_id, "name": k.name,
                "prefix": k.prefix, "enabled": k.enabled, "expires_at": iso(k.expires_at),
                "created_at": iso(k.created_at), "updated_at": iso(k.updated_at)}


class GatewaySchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "internal_url": Field(v.http_url(allow_path=True), required=True),
    }
    update = {k: Field(f.parse) for k, f in create.items()}
    read_only = COMMON_READ_ONLY + ("acked_version", "last_push_at", "last_error")

    def render(self, g: Gateway) -> dict[str, Any]:
        return {"id": g.id, "name": g.name, "internal_url": g.internal_url,
                "acked_version": g.acked_version, "last_push_at": iso(g.last_push_at),
                "last_error": g.last_error, "created_at": iso(g.created_at),
                "updated_at": iso(g.updated_at)}
