"""Idempotent seeding for demos and tests: models with backends, a consumer, a key."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.services.config_state import current_version
from control_plane.services.resources import (BACKENDS, CONSUMERS, KEYS, MODELS,
                                              hash_key)
from control_plane.tables.config import ApiKey, Backend, Consumer, Model


@dataclass(frozen=True)
class Seeded:
    consumer_id: int
    key: str | None  # the plain key when one was created or confirmed, else None
    version: int


def _by_name(session: Session, model: type, name: str) -> Any:
    return session.scalars(select(model).where(model.name == name)).one_or_none()


def seed(session: Session, models: Mapping[str, Sequence[Mapping[str, Any]]], *,
         consumer: str = "demo", key: str | None = None) -> Seeded:
    """Make sure `models` (name → backend specs) and `consumer` exist; rows already
    there (matched by name) are left as they are.

    Backend specs take the API's fields: {"name", "url", "protocol", "weight"?}.
    `key` pins the consumer's API key (a demo's well-known key); without it a key is
    generated only when the consumer has none, and returned once.
    """
    for model_name, backends in models.items():
        model = _by_name(session, Model, model_name) or MODELS.create(
            session, {"name": model_name})
        for spec in backends:
            if _by_name(session, Backend, spec["name"]) is None:
                BACKENDS.create(session, {**spec, "model_id": model.id})

    row = _by_name(session, Consumer, consumer) or CONSUMERS.create(
        session, {"name": consumer})
    plain: str | None = None
    if key is not None:
        existing = session.scalars(
            select(ApiKey).where(ApiKey.key_hash == hash_key(key))).one_or_none()
        if existing is None:
            KEYS.create_with_key(session, {"consumer_id": row.id, "name": "seed"}, key=key)
        plain = key
    elif not session.scalars(select(ApiKey).where(ApiKey.consumer_id == row.id)).first():
        _, plain = KEYS.create_with_key(session, {"consumer_id": row.id, "name": "seed"})
    version = current_version(session)
    session.commit()
    return Seeded(consumer_id=row.id, key=plain, version=version)
