"""Build the snapshot the gateways serve from (format: docs/contracts.md)."""
from __future__ import annotations

import logging
import socket
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from control_plane.clients import backend_tls
from control_plane.services import routes
from control_plane.services import affinity, presets
from control_plane.services.config_state import current_version
from control_plane.settings import Settings
from control_plane.tables.config import (ApiKey, Backend, Consumer, ContentPolicy, JwtIssuer, Mapping,
                                         Model, ModelType, Plan, PLAN_CAPS)

log = logging.getLogger(__name__)


class ResolveError(Exception):
    pass


def resolve_ipv4(host: str) -> str:
    """The first IPv4 address of `host`; the gateway's balancer wants addresses."""
    if host.lower() == "localhost":
        return "127.0.0.1"
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolveError(f"cannot resolve {host!r}: {exc}") from exc
    if not infos:
        raise ResolveError(f"{host!r} has no IPv4 address")
    return infos[0][4][0]


def backend_entry(backend: Backend) -> dict[str, Any]:
    parts = urlsplit(backend.url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return {
        "id": backend.id,
        "name": backend.name,
        "protocol": backend.protocol,
        "scheme": parts.scheme,
        "host": resolve_ipv4(host),
        "port": port,
        "host_header": f"{host}:{parts.port}" if parts.port else host,
        "base_path": parts.path.rstrip("/"),
        "weight": backend.weight,
        **({"auth_header": backend.auth_header} if backend.auth_header else {}),
        # a hosted vendor's request shape (services/presets.py; lua/sluice/shape.lua)
        **{k: getattr(backend, k) for k in ("auth_header_name", "headers", "paths", "query")
           if getattr(backend, k)},
        # a hosted vendor's: the controller's health checks leave it alone
        **({} if presets.probed(backend.preset) else {"probe": False}),
        **({"mapping": backend.mapping.name} if backend.mapping is not None else {}),
        **({"max_in_flight": backend.max_in_flight}
           if backend.max_in_flight is not None else {}),
        **({"tls": tls_entry(backend, host)} if parts.scheme == "https" else {}),
    }


def tls_entry(backend: Backend, url_host: str) -> dict[str, Any]:
    """How the gateway speaks TLS to an https:// backend (docs/contracts.md).
    `trust` names the trust set (backend_tls.trust_id) the gateway verifies against."""
    entry: dict[str, Any] = {
        "verify": backend.tls_verify,
        "server_name": backend.tls_server_name or url_host,
        "trust": backend_tls.trust_id(backend.tls_verify, backend.tls_ca),
    }
    if backend.tls_verify and backend.tls_ca:
        entry["ca"] = backend.tls_ca
    if backend.tls_client_cert and backend.tls_client_key:
        entry["client_cert"] = backend.tls_client_cert
        entry["client_key"] = backend.tls_client_key
    return entry


PLAN_FIELDS = ("rate_per_second", "rate_per_ip", "burst", "max_concurrent", "daily_requests",
               "monthly_requests", "monthly_tokens", "realtime_sessions", "realtime_session_s")


def plan_entry(plan: Plan) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": plan.id, "name": plan.name}
    for field in PLAN_FIELDS:
        entry[field] = getattr(plan, field)
    entry["models"] = plan.model_overrides or {}
    entry["priority"] = plan.priority
    entry["priority_header"] = plan.priority_header
    entry["queue_timeout_ms"] = plan.queue_timeout()
    entry["buffer_at_peak"] = plan.buffer_at_peak
    for field in PLAN_CAPS:   # audio and image work per day: only when capped
        if getattr(plan, field) is not None:
            entry[field] = getattr(plan, field)
    return entry


def jwt_entry(issuer: JwtIssuer) -> dict[str, Any]:
    # keys that left a jwks_uri's set verify until their grace ends; the controller
    # then drops them with a version bump (a snapshot built later leaves them out too)
    now = datetime.now(timezone.utc).timestamp()
    keys = [*issuer.keys, *(r for r in issuer.retired_keys or () if r["until"] > now)]
    return {"id": issuer.id, "name": issuer.name, "issuer": issuer.issuer,
            "audience": issuer.audience, "consumer_claim": issuer.consumer_claim,
            "expires_at": _unix(issuer.expires_at),
            "keys": [{"kid": k["kid"], "alg": k["alg"], "pem": k["pem"]} for k in keys]}


def redacted(snap: dict[str, Any]) -> dict[str, Any]:
    """The snapshot as the admin API shows it: backend credentials (auth_header, the
    mTLS pair) replaced by "<set>"."""
    for model in snap["models"].values():
        for backend in model["backends"]:
            if "auth_header" in backend:
                backend["auth_header"] = "<set>"
            tls = backend.get("tls")
            if tls and "client_key" in tls:
                tls["client_cert"] = tls["client_key"] = "<set>"
    return snap


def _unix(dt: datetime | None) -> int | None:
    return None if dt is None else int(dt.timestamp())


def build(session: Session, settings: Settings | None = None) -> dict[str, Any]:
    """Everything the hot path needs, from enabled rows only; the circuit-breaker
    section comes from `settings` (the defaults when None).

    For a version that matches the content exactly, call this in a REPEATABLE READ
    transaction (the controller does). A backend whose host does not resolve is left
    out with a warning rather than failing the whole snapshot: the other backends
    still need their updates. So is a backend on the wrong GPU class for its model
    (services/affinity.py).
    """
    version = current_version(session)

    models: dict[str, Any] = {}
    gpu_classes = affinity.reported_classes(session)
    for model in session.scalars(
            select(Model).where(Model.enabled).order_by(Model.id)
            .options(selectinload(Model.backends).selectinload(Backend.mapping))):
        backends = []
        for backend in model.backends:
            if not backend.enabled or not affinity.eligible(model, backend, gpu_classes):
                continue
            try:
                backends.append(backend_entry(backend))
            except ResolveError as exc:
                log.warning("snapshot v%d: backend %s left out: %s", version, backend.name, exc)
        models[model.name] = {"id": model.id, "name": model.name,
                              "timeout_ms": model.timeout_ms,
                              "cache_ttl_s": model.cache_ttl_s,
                              "cache_shared": model.cache_shared,
                              "fallback_model": model.fallback_model,
                              "mask_pii": model.mask_pii,
                              "max_output_tokens": model.max_output_tokens,
                              "backends": backends}
        if model.gpu_class:
            models[model.name]["gpu_class"] = model.gpu_class
        # audio and image models only (lua/sluice/media.lua)
        if model.media_tasks:
            models[model.name]["media_tasks"] = model.media_tasks
        if model.max_request_bytes is not None:
            models[model.name]["max_request_bytes"] = model.max_request_bytes
        if model.phi_policy:   # lua/sluice/phi.lua
            models[model.name]["phi_policy"] = model.phi_policy
    for entry in models.values():   # a disabled fallback is no fallback
        if entry["fallback_model"] not in models:
            entry["fallback_model"] = None

    consumers = {
        str(c.id): {"id": c.id, "name": c.name, "allowed_models": c.allowed_models,
                    "attributes": c.attributes or {}, "plan_id": c.plan_id,
                    **({"phi_policy": c.phi_policy} if c.phi_policy else {})}
        for c in session.scalars(select(Consumer).where(Consumer.enabled).order_by(Consumer.id))
    }

    keys = {
        k.key_hash: {"id": k.id, "consumer_id": k.consumer_id, "prefix": k.prefix,
                     "expires_at": _unix(k.expires_at)}
        for k in session.scalars(
            select(ApiKey).join(Consumer)
            .where(ApiKey.enabled, Consumer.enabled).order_by(ApiKey.id))
    }

    plans = {str(p.id): plan_entry(p)
             for p in session.scalars(select(Plan).order_by(Plan.id))}

    jwt = {str(j.id): jwt_entry(j)
           for j in session.scalars(select(JwtIssuer).where(JwtIssuer.enabled)
                                    .order_by(JwtIssuer.id))}

    mappings = {
        m.name: {"path": m.path, "request": m.request, "response": m.response,
                 **(m.transport or {})}
        for m in session.scalars(select(Mapping).order_by(Mapping.id))
    }

    content_policies = [
        {"id": p.id, "name": p.name, "model": p.model, "terms": p.terms}
        for p in session.scalars(select(ContentPolicy).where(ContentPolicy.enabled)
                                 .order_by(ContentPolicy.id))]

    route_section = routes.snapshot_section(session, models)
    # a type whose model or route is gone (or disabled) is left out: 404 at the gateway
    model_types = {
        t.model_type: t.target
        for t in session.scalars(select(ModelType).order_by(ModelType.id))
        if t.target in models or t.target in route_section}

    return {
        "version": version,
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "models": models,
        "mappings": mappings,
        "consumers": consumers,
        "keys": keys,
        "plans": plans,
        "jwt": jwt,
        "content_policies": content_policies,
        "routes": route_section,
        "model_types": model_types,
        "breaker": (settings or Settings()).breaker(),
        "ip_limit": (settings or Settings()).ip_limit(),
    }
